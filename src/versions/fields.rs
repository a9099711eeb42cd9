//! [`Fields`]: a JSON object whose members keep their order, what a version change's
//! transforms edit.

use std::fmt;

use indexmap::IndexMap;
use serde_json::Value;

/// A JSON object as served, its members in their order: a resource (an order, an
/// organization) in the newer version's shape, for a [`VersionChange`](super::VersionChange)
/// to turn into the older one's.
///
/// Members keep their places when edited, so a transform that undoes an addition gives back
/// the older version's bytes exactly.
#[derive(Clone, Default, PartialEq)]
pub struct Fields(IndexMap<String, Value>);

impl Fields {
    /// Reads a JSON object.
    ///
    /// # Errors
    ///
    /// When `json` is not a JSON object.
    pub fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json).map(Self)
    }

    /// The object's compact JSON, its members in their order.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).expect("a map of strings to JSON values always encodes")
    }

    /// The member `name`'s value, if the object has one.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// The member `name`'s value, to change in place.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.0.get_mut(name)
    }

    /// Removes the member `name`, keeping the others' order, and returns its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        self.0.shift_remove(name)
    }

    /// Sets the member `name`: in its place if the object has it, else last.
    pub fn insert(&mut self, name: impl Into<String>, value: Value) {
        self.0.insert(name.into(), value);
    }

    /// Sets the member `name` right after the member `after` (last when there is none), or
    /// moves it there.
    pub fn insert_after(&mut self, after: &str, name: impl Into<String>, value: Value) {
        let name = name.into();
        self.0.shift_remove(&name);
        let index = self
            .0
            .get_index_of(after)
            .map_or(self.0.len(), |index| index + 1);
        self.0.shift_insert(index, name, value);
    }

    /// Renames the member `from` to `to` in its place; nothing when there is no `from`.
    pub fn rename(&mut self, from: &str, to: impl Into<String>) {
        if let Some(index) = self.0.get_index_of(from) {
            if let Some((_, value)) = self.0.shift_remove_index(index) {
                self.0.shift_insert(index, to.into(), value);
            }
        }
    }

    /// The members' names, in their order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_keep_the_members_order_so_undoing_an_addition_gives_the_bytes_back() {
        let json = br#"{"id":"o1","n":1,"s":"a\"b\u00e9","createdAt":"2026-01-01T00:00:00.000Z"}"#;
        let mut fields = Fields::from_json(json).unwrap();
        fields.insert_after("createdAt", "updatedAt", Value::from("x"));
        assert_eq!(
            fields.names().collect::<Vec<_>>(),
            ["id", "n", "s", "createdAt", "updatedAt"]
        );
        fields.remove("updatedAt");
        assert_eq!(
            String::from_utf8(fields.to_json()).unwrap(),
            r#"{"id":"o1","n":1,"s":"a\"bé","createdAt":"2026-01-01T00:00:00.000Z"}"#
        );
        fields.rename("n", "number");
        fields.insert_after("missing", "last", Value::Null);
        assert_eq!(
            fields.names().collect::<Vec<_>>(),
            ["id", "number", "s", "createdAt", "last"]
        );
        assert!(Fields::from_json(b"[1]").is_err());
    }
}
