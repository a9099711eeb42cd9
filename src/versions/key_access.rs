//! The change of [`KEY_ACCESS`](super::KEY_ACCESS): `GET /me` says what the key may read.

use super::{Fields, Resource, VersionChange};

/// `GET /me` gained `data.key`: what the key may read, its `permissions` (the routes it may
/// call beyond those open to every key: `orders`, `events`) and its `providers` (the
/// providers whose orders it reads, or `null` for every order of its organization), so an
/// integration can confirm its setup with the one call every key may make.
///
/// Before it, `data` held the organization only.
#[derive(Clone, Copy, Debug, Default)]
pub struct MeKeyAccess;

impl VersionChange for MeKeyAccess {
    fn description(&self) -> &'static str {
        "`GET /me` has `data.key`: what the key may read, its `permissions` (of `orders` and \
         `events`, the routes beyond those open to every key) and its `providers` (the \
         providers whose orders it reads, or `null` for every order of its organization)."
    }

    fn routes(&self) -> &'static [&'static str] {
        &["/me"]
    }

    fn resources(&self) -> &'static [Resource] {
        &[Resource::Me]
    }

    fn me(&self, data: &mut Fields) {
        data.remove("key");
    }
}

#[cfg(test)]
mod tests {
    use crate::versions::{Versions, KEY_ACCESS, UPDATED_AT};

    #[test]
    fn the_versions_before_read_the_organization_alone() {
        let versions = Versions::shipped();
        let organization = br#"{"id":"o","name":"n"}"#;
        let key = br#"{"key":{"permissions":["orders"],"providers":["meta"]}}"#;
        assert_eq!(
            versions.me_data(UPDATED_AT, organization, key).unwrap(),
            br#"{"organization":{"id":"o","name":"n"}}"#
        );
        assert_eq!(
            versions.me_data(KEY_ACCESS, organization, key).unwrap(),
            br#"{"organization":{"id":"o","name":"n"},"key":{"permissions":["orders"],"providers":["meta"]}}"#
        );
    }
}
