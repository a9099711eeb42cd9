//! What routes a key may call ([`Permissions`]): `orders` (`GET /orders`) and `events`
//! (`GET /events`). `/me`, `/deprecations`, `/versions` and the OpenAPI document are open to
//! every usable key, so a restricted key can always confirm its setup and learn what it may
//! do. A key issued without permissions named keeps every one ([`Permissions::ALL`]), as
//! every key that existed before permissions did.

use std::fmt;

use serde::{Serialize, Serializer};

/// A route permission of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Permission {
    /// `GET /orders`: pages of the organization's orders.
    Orders,
    /// `GET /events`: the organization's events feed.
    Events,
}

impl Permission {
    /// Every permission, in the order they are listed.
    pub const ALL: [Self; 2] = [Self::Orders, Self::Events];

    /// Its name: `orders` or `events` (the scope of RFC 6750's `insufficient_scope`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Orders => "orders",
            Self::Events => "events",
        }
    }

    /// The permission named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|permission| permission.as_str() == name)
    }

    fn bit(self) -> u8 {
        match self {
            Self::Orders => 1,
            Self::Events => 2,
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The set of [`Permission`]s a key holds. Serializes as their names, in
/// [`Permission::ALL`]'s order (`["orders", "events"]`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permissions(u8);

impl Permissions {
    /// Every permission: what a key issued without restrictions holds.
    pub const ALL: Self = Self(3);
    /// None: a key that may call only the routes open to every key (`/me` and the like).
    pub const NONE: Self = Self(0);

    /// The set of `permissions`.
    pub fn of(permissions: impl IntoIterator<Item = Permission>) -> Self {
        Self(
            permissions
                .into_iter()
                .fold(0, |bits, permission| bits | permission.bit()),
        )
    }

    /// The set named by `names` (`orders`, `events`), or the first name that is no
    /// permission.
    ///
    /// # Errors
    ///
    /// The unknown name, for a message that lists the permissions there are.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        names.into_iter().try_fold(Self::NONE, |set, name| {
            Permission::parse(name)
                .map(|permission| set.with(permission))
                .ok_or_else(|| name.to_owned())
        })
    }

    /// This set with `permission` too.
    #[must_use]
    pub fn with(self, permission: Permission) -> Self {
        Self(self.0 | permission.bit())
    }

    /// Whether the set holds `permission`.
    pub fn allows(self, permission: Permission) -> bool {
        self.0 & permission.bit() != 0
    }

    /// Whether the set holds every permission (a key without route restrictions).
    pub fn is_all(self) -> bool {
        self == Self::ALL
    }

    /// The set as bits, one per permission (for a cache's hash).
    pub(crate) const fn bits(self) -> u8 {
        self.0
    }

    /// The permissions held, in [`Permission::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL
            .into_iter()
            .filter(move |permission| self.allows(*permission))
    }
}

impl Default for Permissions {
    /// Every permission.
    fn default() -> Self {
        Self::ALL
    }
}

impl fmt::Debug for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// The names, space-separated (`orders events`; empty for none): an audit entry's detail.
impl fmt::Display for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = self.iter();
        if let Some(first) = names.next() {
            f.write_str(first.as_str())?;
        }
        for name in names {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

impl Serialize for Permissions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter().map(Permission::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_lists_its_names_in_order_and_refuses_an_unknown_one() {
        let events = Permissions::parse(["events"]).unwrap();
        assert!(events.allows(Permission::Events) && !events.allows(Permission::Orders));
        assert_eq!(
            Permissions::parse(["events", "orders"]).unwrap(),
            Permissions::ALL
        );
        assert_eq!(Permissions::parse(["order"]), Err("order".to_owned()));
        assert_eq!(
            serde_json::to_string(&Permissions::ALL).unwrap(),
            r#"["orders","events"]"#
        );
        assert_eq!(Permissions::NONE.to_string(), "");
        assert_eq!(Permissions::ALL.to_string(), "orders events");
        assert_eq!(Permissions::default(), Permissions::ALL);
    }
}
