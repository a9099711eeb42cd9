//! The representation of `GET /me`, kept per worker thread for the organizations it served
//! last: a hit is answered without writing, hashing or tagging the body again.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use crate::api::conditional;
use crate::api::response::{tagged_headers, ME_CLOSE, ME_OPEN};
use crate::model::Organization;

/// The representation of an organization at `GET /me` ([`with_me_representation`]).
pub(crate) struct MeRepresentation {
    pub(crate) body: Bytes,
    /// The headers of its tagged `200`, the tag in place.
    pub(crate) tagged_headers: HeaderMap,
}

/// Calls `answer` with the representation of `organization` at `GET /me`: its body and the
/// headers of its tagged `200` (the entity tag among them).
///
/// They depend on the organization only, and a store that keeps principals in memory hands
/// out the same `Arc<Organization>` for every request with a key: so each worker thread keeps
/// the last few it made ([`RECENT_ME_SLOTS`], one slot per organization object, chosen by
/// its address), and answers a hit without writing, hashing or tagging the body again (about
/// a fifth of the library's work per `/me` request): `answer` clones what it sends. A slot
/// holds its organization, so the address cannot be reused while it is there: a hit is the
/// same immutable object, and so the same body.
pub(crate) fn with_me_representation<T>(
    organization: &Arc<Organization>,
    answer: impl FnOnce(&MeRepresentation) -> T,
) -> Result<T, serde_json::Error> {
    type Slot = Option<(Arc<Organization>, MeRepresentation)>;
    thread_local! {
        static RECENT: RefCell<[Slot; RECENT_ME_SLOTS]> =
            const { RefCell::new([const { None }; RECENT_ME_SLOTS]) };
    }
    // Fibonacci hashing of the address: its low bits are the allocator's alignment (an
    // allocator that rounds to 64 bytes leaves six of them zero), the product's top bits mix
    // them all.
    let address = Arc::as_ptr(organization) as u64;
    let index =
        (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RECENT_ME_SLOTS.ilog2())) as usize;
    RECENT.with_borrow_mut(|recent| {
        let slot = &mut recent[index];
        if let Some((held, representation)) = slot {
            if Arc::ptr_eq(held, organization) {
                return Ok(answer(representation));
            }
        }
        let body = me_body(organization)?;
        let etag = conditional::entity_tag(&[&body]);
        let representation = MeRepresentation {
            tagged_headers: tagged_headers(&etag),
            body,
        };
        let answered = answer(&representation);
        *slot = Some((organization.clone(), representation));
        Ok(answered)
    })
}

/// How many `/me` representations each worker thread keeps ([`with_me_representation`]): a power
/// of two, indexed by the top bits of a hash.
const RECENT_ME_SLOTS: usize = 64;
const _: () = assert!(RECENT_ME_SLOTS.is_power_of_two());

/// The body of `GET /me` for `organization`.
fn me_body(organization: &Organization) -> Result<Bytes, serde_json::Error> {
    // Exact when nothing needs escaping, so `Bytes::from` takes the buffer without allocating.
    let mut body = Vec::with_capacity(
        ME_OPEN.len()
            + r#"{"id":"","name":""}"#.len()
            + organization.id.len()
            + organization.name.len()
            + ME_CLOSE.len(),
    );
    body.extend_from_slice(ME_OPEN);
    body.extend_from_slice(br#"{"id":"#);
    write_json_string(&mut body, &organization.id)?;
    body.extend_from_slice(br#","name":"#);
    write_json_string(&mut body, &organization.name)?;
    body.push(b'}');
    body.extend_from_slice(ME_CLOSE);
    Ok(body.into())
}

/// Writes `text` as a JSON string: as it is when nothing in it needs escaping (the common
/// case, and a copy), else through serde_json.
fn write_json_string(out: &mut Vec<u8>, text: &str) -> Result<(), serde_json::Error> {
    // No early exit, so the compiler can check many bytes at once.
    let plain = text.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(out, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderValue, CACHE_CONTROL, ETAG};

    fn organization(id: &str, name: &str) -> Arc<Organization> {
        Arc::new(Organization {
            id: id.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The body and tag [`with_me_representation`] answers with, checking its headers.
    fn me_representation(organization: &Arc<Organization>) -> (Bytes, HeaderValue) {
        with_me_representation(organization, |me| {
            assert_eq!(me.tagged_headers[CACHE_CONTROL], "private, no-cache");
            (me.body.clone(), me.tagged_headers[ETAG].clone())
        })
        .unwrap()
    }

    #[test]
    fn me_representations_are_kept_per_organization_object_and_always_its_own() {
        let demo = organization("org_demo", "Demo \"Media\"");
        let (body, etag) = me_representation(&demo);
        let expected = me_body(&demo).unwrap();
        assert_eq!(body, expected);
        assert_eq!(etag, conditional::entity_tag(&[&expected]));
        // The same object again: the same bytes, kept rather than written again.
        let (again, again_tag) = me_representation(&demo);
        assert_eq!(again.as_ptr(), body.as_ptr());
        assert_eq!(again_tag, etag);
        // An equal organization in another object: an equal body; a renamed one: its own.
        let copy = me_representation(&organization("org_demo", "Demo \"Media\""));
        assert_eq!(copy, (body.clone(), etag.clone()));
        let (renamed, renamed_tag) = me_representation(&organization("org_demo", "Renamed"));
        assert!(renamed.ends_with(br#""name":"Renamed"}}}"#));
        assert_ne!(renamed_tag, etag);
        // Many more organizations than slots, each asked twice: every answer is its own.
        let many: Vec<_> = (0..4 * RECENT_ME_SLOTS)
            .map(|n| organization(&format!("org_{n}"), &format!("Agency {n}")))
            .collect();
        for _ in 0..2 {
            for (n, organization) in many.iter().enumerate() {
                let (body, etag) = me_representation(organization);
                assert_eq!(body, me_body(organization).unwrap(), "{n}");
                assert_eq!(etag, conditional::entity_tag(&[&body]));
            }
        }
    }
}
