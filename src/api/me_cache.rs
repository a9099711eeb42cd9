//! The representation of `GET /me`, kept per worker thread for the organizations it served
//! last: a hit is answered without writing, hashing or tagging the body again.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;

use crate::api::conditional;
use crate::api::response::{tagged_headers, ME_CLOSE, ME_OPEN};
use crate::key::Permissions;
use crate::model::Organization;
use crate::store::Principal;
use crate::versions::{ApiVersion, Resource, Versions};

/// The representation of an organization at `GET /me` ([`with_me_representation`]).
pub(crate) struct MeRepresentation {
    pub(crate) body: Bytes,
    /// The headers of its tagged `200`, the tag in place.
    pub(crate) tagged_headers: HeaderMap,
}

/// What a key may read, as `GET /me` says it from [`KEY_ACCESS`](crate::versions::KEY_ACCESS)
/// on (`data.key`).
#[derive(Clone, Copy, serde::Serialize)]
pub(crate) struct KeyAccess<'a> {
    permissions: Permissions,
    providers: Option<&'a [String]>,
}

impl<'a> KeyAccess<'a> {
    /// What `principal`'s key may read.
    pub(crate) fn of(principal: &'a Principal) -> Self {
        Self {
            permissions: principal.permissions(),
            providers: principal.providers().map(|providers| &providers[..]),
        }
    }
}

/// Calls `answer` with the representation of `organization` at `GET /me` at `version` of
/// `chain`, for a key that may read `access`: its body and the headers of its tagged `200`
/// (the entity tag among them).
///
/// They depend on these four only, and a store that keeps principals in memory hands out
/// the same `Arc<Organization>` for every request with a key: so each worker thread keeps the
/// last it made ([`RECENT_ME_SLOTS`], one slot per organization object, version and
/// access, chosen by the object's address, the version and the access), and answers a hit without writing,
/// hashing or tagging the body again (about a fifth of the library's work per `/me`
/// request): `answer` clones what it sends. A slot holds its organization and chain, so their
/// addresses cannot be reused while it is there: a hit is the same immutable objects, and so
/// the same body.
pub(crate) fn with_me_representation<T>(
    chain: &Versions,
    version: ApiVersion,
    organization: &Arc<Organization>,
    access: KeyAccess<'_>,
    answer: impl FnOnce(&MeRepresentation) -> T,
) -> Result<T, serde_json::Error> {
    struct Held {
        organization: Arc<Organization>,
        chain: Versions,
        version: ApiVersion,
        permissions: Permissions,
        providers: Option<Box<[String]>>,
        representation: MeRepresentation,
    }
    thread_local! {
        /// Allocated at the thread's first `/me`; each held representation boxed, so a slot
        /// costs a pointer until it is used.
        static RECENT: RefCell<Vec<Option<Box<Held>>>> = const { RefCell::new(Vec::new()) };
    }
    // The address and the version's day, mixed: the address's low bits are the allocator's
    // alignment and its objects lie at regular strides, which a plain multiply maps to few
    // slots for some strides; `mix64`'s top bits depend on every bit.
    let day = chrono::Datelike::num_days_from_ce(&version.date()).unsigned_abs();
    // A restricted key's access moves it to another slot than its organization's other keys
    // (by its permissions and its providers), so they do not take turns at one.
    let restricted = access.providers.map_or(0, |providers| {
        providers.iter().fold(1, |hash, provider| {
            (hash ^ xxhash_rust::xxh3::xxh3_64(provider.as_bytes()))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
    }) ^ u64::from(access.permissions.bits()) << 32;
    let address = Arc::as_ptr(organization) as u64 ^ u64::from(day) ^ restricted;
    let index = (crate::hashing::mix64(address) >> (64 - RECENT_ME_SLOTS.ilog2())) as usize;
    RECENT.with_borrow_mut(|recent| {
        if recent.is_empty() {
            recent.resize_with(RECENT_ME_SLOTS, || None);
        }
        let slot = &mut recent[index];
        if let Some(held) = slot {
            if Arc::ptr_eq(&held.organization, organization)
                && held.version == version
                && held.chain.is(chain)
                && held.permissions == access.permissions
                && held.providers.as_deref() == access.providers
            {
                return Ok(answer(&held.representation));
            }
        }
        let representation = me_representation(chain, version, organization, access)?;
        let answered = answer(&representation);
        *slot = Some(Box::new(Held {
            organization: organization.clone(),
            chain: chain.clone(),
            version,
            permissions: access.permissions,
            providers: access.providers.map(Box::from),
            representation,
        }));
        Ok(answered)
    })
}

/// How many `/me` representations each worker thread keeps ([`with_me_representation`]): a power
/// of two, indexed by the top bits of a hash. Enough for a host's keys to take turns on a
/// thread without rebuilding each other's answers: one slot per organization (and version and
/// access), chosen by a hash, so `n` organizations in turn find theirs kept with a chance of
/// about e^(-n/8192) (at 1,000, 88 in 100; 64 slots kept none). A slot is a pointer
/// (64 KiB a thread) and a representation under a KiB.
const RECENT_ME_SLOTS: usize = 8192;
const _: () = assert!(RECENT_ME_SLOTS.is_power_of_two());

/// The representation of `GET /me` for `organization` and a key that may read `access`, at
/// `version` of `chain`: what [`with_me_representation`] keeps.
fn me_representation(
    chain: &Versions,
    version: ApiVersion,
    organization: &Organization,
    access: KeyAccess<'_>,
) -> Result<MeRepresentation, serde_json::Error> {
    let body = me_body(chain, version, organization, access)?;
    Ok(MeRepresentation {
        tagged_headers: tagged_headers(&conditional::entity_tag(&[&body])),
        body,
    })
}

/// The body of `GET /me` for `organization` and a key that may read `access`, at `version`.
fn me_body(
    chain: &Versions,
    version: ApiVersion,
    organization: &Organization,
    access: KeyAccess<'_>,
) -> Result<Bytes, serde_json::Error> {
    // Exact when nothing needs escaping and the key is unrestricted.
    let mut object = Vec::with_capacity(
        r#"{"id":"","name":""}"#.len() + organization.id.len() + organization.name.len(),
    );
    object.extend_from_slice(br#"{"id":"#);
    write_json_string(&mut object, &organization.id)?;
    object.extend_from_slice(br#","name":"#);
    write_json_string(&mut object, &organization.name)?;
    object.push(b'}');
    let mut beside = Vec::with_capacity(UNRESTRICTED_KEY.len());
    beside.extend_from_slice(br#"{"key":"#);
    serde_json::to_writer(&mut beside, &access)?;
    beside.push(b'}');
    let mut body = Vec::with_capacity(ME_OPEN.len() + object.len() + beside.len() + 32);
    body.extend_from_slice(ME_OPEN);
    if chain.reshapes(version, Resource::Organization) || chain.reshapes(version, Resource::Me) {
        body.extend_from_slice(&chain.me_data(version, &object, &beside)?);
    } else {
        // The newest shape: the organization first, then what the key may read.
        body.extend_from_slice(br#"{"organization":"#);
        body.extend_from_slice(&object);
        body.push(b',');
        body.extend_from_slice(&beside[1..]);
    }
    body.extend_from_slice(ME_CLOSE);
    Ok(body.into())
}

/// `data.key`'s member for a key without restrictions, as [`me_body`] writes it.
const UNRESTRICTED_KEY: &[u8] = br#"{"key":{"permissions":["orders","events"],"providers":null}}"#;

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
    use crate::versions::{FIRST, NEWEST, UPDATED_AT};
    use http::header::{HeaderValue, CACHE_CONTROL, ETAG};

    fn organization(id: &str, name: &str) -> Arc<Organization> {
        Arc::new(Organization {
            id: id.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The body and tag [`with_me_representation`] answers with at the newest version,
    /// checking its headers.
    fn me_representation_of(organization: &Arc<Organization>) -> (Bytes, HeaderValue) {
        represented(shipped(), NEWEST, organization)
    }

    /// One chain for every call, as a service's configuration holds one.
    fn shipped() -> &'static Versions {
        static SHIPPED: std::sync::OnceLock<Versions> = std::sync::OnceLock::new();
        SHIPPED.get_or_init(Versions::shipped)
    }

    fn represented(
        chain: &Versions,
        version: ApiVersion,
        organization: &Arc<Organization>,
    ) -> (Bytes, HeaderValue) {
        with_me_representation(chain, version, organization, UNRESTRICTED, |me| {
            assert_eq!(me.tagged_headers[CACHE_CONTROL], "private, no-cache");
            (me.body.clone(), me.tagged_headers[ETAG].clone())
        })
        .unwrap()
    }

    fn body_of(organization: &Organization) -> Bytes {
        me_body(shipped(), NEWEST, organization, UNRESTRICTED).unwrap()
    }

    const UNRESTRICTED: KeyAccess<'static> = KeyAccess {
        permissions: Permissions::ALL,
        providers: None,
    };

    #[test]
    fn me_representations_are_kept_per_organization_object_and_always_its_own() {
        let demo = organization("org_demo", "Demo \"Media\"");
        let (body, etag) = me_representation_of(&demo);
        let expected = body_of(&demo);
        assert_eq!(body, expected);
        assert_eq!(etag, conditional::entity_tag(&[&expected]));
        // The same object again: the same bytes, kept rather than written again.
        let (again, again_tag) = me_representation_of(&demo);
        assert_eq!(again.as_ptr(), body.as_ptr());
        assert_eq!(again_tag, etag);
        // An equal organization in another object: an equal body; a renamed one: its own.
        let copy = me_representation_of(&organization("org_demo", "Demo \"Media\""));
        assert_eq!(copy, (body.clone(), etag.clone()));
        let (renamed, renamed_tag) = me_representation_of(&organization("org_demo", "Renamed"));
        assert!(renamed.ends_with(
            br#""name":"Renamed"},"key":{"permissions":["orders","events"],"providers":null}}}"#
        ));
        assert_ne!(renamed_tag, etag);
        // Many more organizations than slots, each asked twice: every answer is its own.
        let many: Vec<_> = (0..2 * RECENT_ME_SLOTS)
            .map(|n| organization(&format!("org_{n}"), &format!("Agency {n}")))
            .collect();
        for _ in 0..2 {
            for (n, organization) in many.iter().enumerate() {
                let (body, etag) = me_representation_of(organization);
                assert_eq!(body, body_of(organization), "{n}");
                assert_eq!(etag, conditional::entity_tag(&[&body]));
            }
        }
    }

    #[test]
    fn a_thousand_organizations_in_turn_mostly_find_theirs_kept() {
        let many: Vec<_> = (0..1_000)
            .map(|n| organization(&format!("org_turn_{n}"), &format!("Agency {n}")))
            .collect();
        let first: Vec<Bytes> = many.iter().map(|o| me_representation_of(o).0).collect();
        let kept = many
            .iter()
            .zip(&first)
            .filter(|(organization, body)| {
                let (again, _) = me_representation_of(organization);
                assert_eq!(again, body_of(organization));
                again.as_ptr() == body.as_ptr()
            })
            .count();
        // About e^(-1000/8192) of them, 88 in 100, by the slots' hash.
        assert!(kept >= 750, "{kept} of 1,000 kept");
    }

    #[test]
    fn each_access_has_its_own_representation_and_keeps_it() {
        let demo = organization("org_demo", "Demo");
        let meta = ["meta".to_owned()];
        let google = ["google".to_owned()];
        let orders = Permissions::of([crate::key::Permission::Orders]);
        let accesses = [
            UNRESTRICTED,
            KeyAccess {
                permissions: orders,
                providers: None,
            },
            KeyAccess {
                permissions: orders,
                providers: Some(&meta),
            },
            KeyAccess {
                permissions: orders,
                providers: Some(&google),
            },
            KeyAccess {
                permissions: Permissions::ALL,
                providers: Some(&meta),
            },
        ];
        let represent = |access| {
            with_me_representation(shipped(), NEWEST, &demo, access, |me| me.body.clone()).unwrap()
        };
        // Each asked twice: its own body, kept (the same bytes) for the second time.
        let first: Vec<Bytes> = accesses
            .iter()
            .map(|&access| {
                let body = represent(access);
                assert_eq!(body, me_body(shipped(), NEWEST, &demo, access).unwrap());
                assert_eq!(represent(access).as_ptr(), body.as_ptr());
                body
            })
            .collect();
        // Asked in turns (some may share a slot): each still its own body.
        for _ in 0..2 {
            for (access, body) in accesses.iter().zip(&first) {
                assert_eq!(represent(*access), body);
            }
        }
        for (n, body) in first.iter().enumerate() {
            assert!(first[n + 1..].iter().all(|other| other != body), "{n}");
        }
    }

    #[test]
    fn each_version_and_chain_has_its_own_representation() {
        let demo = organization("org_demo", "Demo");
        let shipped = shipped();
        let (newest, _) = represented(shipped, NEWEST, &demo);
        let (older, older_tag) = represented(shipped, UPDATED_AT, &demo);
        assert_eq!(
            UNRESTRICTED_KEY,
            br#"{"key":{"permissions":["orders","events"],"providers":null}}"#
        );
        assert!(newest.ends_with(br#"{"organization":{"id":"org_demo","name":"Demo"},"key":{"permissions":["orders","events"],"providers":null}}}"#));
        assert!(older.ends_with(br#""data":{"organization":{"id":"org_demo","name":"Demo"}}}"#));
        assert_eq!(represented(shipped, UPDATED_AT, &demo).1, older_tag);
        // Another chain (a host's own of one version): the newest shape, kept apart.
        let own = Versions::new(FIRST);
        let (own_body, _) = represented(&own, FIRST, &demo);
        assert_eq!(own_body, newest);
        assert_eq!(represented(shipped, NEWEST, &demo).0, newest);
        // A restricted key's own body.
        let providers = ["meta".to_owned()];
        let restricted = me_body(
            shipped,
            NEWEST,
            &demo,
            KeyAccess {
                permissions: Permissions::of([crate::key::Permission::Orders]),
                providers: Some(&providers),
            },
        )
        .unwrap();
        assert!(restricted.ends_with(br#""key":{"permissions":["orders"],"providers":["meta"]}}}"#));
        assert_eq!(
            me_body(
                shipped,
                UPDATED_AT,
                &demo,
                KeyAccess {
                    permissions: Permissions::NONE,
                    providers: Some(&providers)
                }
            )
            .unwrap(),
            older
        );
    }
}
