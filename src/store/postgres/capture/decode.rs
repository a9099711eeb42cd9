//! `test_decoding`'s text, parsed: what the capture reads of each row change
//! (`table public.partner_orders: UPDATE: old-key: id[text]:'o1' ... new-tuple: ...`).
//! Values stay in their types' text form, which the database reads back with the same input
//! functions (`jsonb_populate_record`), so nothing is converted twice.

use serde_json::{Map, Value};

/// One row change of a table, as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RowChange {
    /// The table, as `test_decoding` names it (`schema.table`, each part quoted as
    /// `quote_ident` quotes it).
    pub(super) table: String,
    /// What was done.
    pub(super) operation: Operation,
    /// The row before (`UPDATE` and `DELETE` of a table with `REPLICA IDENTITY FULL`; its
    /// key's columns only, or none, otherwise): column name to text (`null`: SQL NULL).
    pub(super) old: Option<Map<String, Value>>,
    /// The row after (`INSERT`, `UPDATE`): a value that was not logged (an unchanged TOAST
    /// value) is the old row's.
    pub(super) new: Option<Map<String, Value>>,
}

/// The kind of a row change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation {
    /// `INSERT`.
    Insert,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

/// Parses one line of `test_decoding`'s output that starts `table `; `Ok(None)` for a change
/// that is not a row's (`TRUNCATE`, which the crate's tables refuse).
pub(super) fn row_change(line: &str) -> Result<Option<RowChange>, String> {
    let rest = line
        .strip_prefix("table ")
        .ok_or_else(|| format!("not a table's change: {}", excerpt(line)))?;
    let (table, rest) = split_table(rest)?;
    let (operation, rest) = if let Some(rest) = rest.strip_prefix("INSERT: ") {
        (Operation::Insert, rest)
    } else if let Some(rest) = rest.strip_prefix("UPDATE: ") {
        (Operation::Update, rest)
    } else if let Some(rest) = rest.strip_prefix("DELETE: ") {
        (Operation::Delete, rest)
    } else if rest.starts_with("TRUNCATE:") {
        return Ok(None);
    } else {
        return Err(format!("an unknown change: {}", excerpt(line)));
    };
    let (old, new) = match operation {
        Operation::Insert => (None, tuple_or_none(rest)?),
        Operation::Delete => (tuple_or_none(rest)?, None),
        Operation::Update => match rest.strip_prefix("old-key: ") {
            Some(rest) => {
                let (old, rest) = tuple(rest, Some(" new-tuple: "))?;
                let new = tuple(rest, None)?.0;
                (Some(old), Some(new))
            }
            None => (None, tuple_or_none(rest)?),
        },
    };
    let new = new.map(|mut new| {
        // A value not logged (TOAST, unchanged) is the old row's, which `REPLICA IDENTITY
        // FULL` logs whole.
        for (column, value) in &mut new {
            if value.is_object() {
                *value = old
                    .as_ref()
                    .and_then(|old| old.get(column))
                    .cloned()
                    .unwrap_or(Value::Null);
            }
        }
        new
    });
    Ok(Some(RowChange {
        table: table.to_owned(),
        operation,
        old,
        new,
    }))
}

/// `schema.table: ` split from the rest (a quoted part may hold `": "`).
fn split_table(text: &str) -> Result<(&str, &str), String> {
    let mut in_quotes = false;
    for (at, c) in text.char_indices() {
        match c {
            '"' => in_quotes = !in_quotes,
            ':' if !in_quotes && text[at..].starts_with(": ") => {
                return Ok((&text[..at], &text[at + 2..]));
            }
            _ => {}
        }
    }
    Err(format!("no table name in: {}", excerpt(text)))
}

fn tuple_or_none(text: &str) -> Result<Option<Map<String, Value>>, String> {
    if text.starts_with("(no-tuple-data)") {
        return Ok(None);
    }
    Ok(Some(tuple(text, None)?.0))
}

/// The columns `name[type]:value` separated by spaces, up to `until` (then the text after
/// it) or the end. An unchanged TOAST value is `{}` (an object), for [`row_change`] to fill.
fn tuple<'a>(
    mut text: &'a str,
    until: Option<&str>,
) -> Result<(Map<String, Value>, &'a str), String> {
    let mut columns = Map::new();
    loop {
        if text.is_empty() {
            return match until {
                None => Ok((columns, text)),
                Some(until) => Err(format!("no {until:?} in an update")),
            };
        }
        if let Some(until) = until {
            if let Some(rest) = text.strip_prefix(until.trim_start()) {
                return Ok((columns, rest));
            }
        }
        let (name, rest) = column_name(text)?;
        let rest = rest
            .strip_prefix('[')
            .ok_or_else(|| format!("no type after column {name:?}"))?;
        // The type's name may hold brackets (`text[]`) and spaces, never "]:".
        let end = rest
            .find("]:")
            .ok_or_else(|| format!("no end to the type of column {name:?}"))?;
        let (value, rest) = column_value(&rest[end + 2..])?;
        columns.insert(name, value);
        text = rest.strip_prefix(' ').unwrap_or(rest);
        if !rest.is_empty() && !rest.starts_with(' ') {
            return Err(format!("no space after column in: {}", excerpt(rest)));
        }
    }
}

/// A column's name, unquoted (`"position"` is `position`, `""` a quote).
fn column_name(text: &str) -> Result<(String, &str), String> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = quoted.char_indices();
        while let Some((at, c)) = chars.next() {
            if c == '"' {
                if quoted[at + 1..].starts_with('"') {
                    name.push('"');
                    chars.next();
                } else {
                    return Ok((name, &quoted[at + 1..]));
                }
            } else {
                name.push(c);
            }
        }
        Err(format!("an unterminated column name: {}", excerpt(text)))
    } else {
        let end = text
            .find('[')
            .ok_or_else(|| format!("no column in: {}", excerpt(text)))?;
        Ok((text[..end].to_owned(), &text[end..]))
    }
}

/// A value: `null`, `unchanged-toast-datum`, a quoted literal (`''` a quote), or a bare one
/// (numbers, booleans; `B'0101'` for bits).
fn column_value(text: &str) -> Result<(Value, &str), String> {
    if let Some(rest) = text.strip_prefix("unchanged-toast-datum") {
        return Ok((Value::Object(Map::new()), rest));
    }
    if let Some(quoted) = text.strip_prefix('\'') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((at, c)) = chars.next() {
            if c == '\'' {
                if quoted[at + 1..].starts_with('\'') {
                    value.push('\'');
                    chars.next();
                } else {
                    return Ok((Value::String(value), &quoted[at + 1..]));
                }
            } else {
                value.push(c);
            }
        }
        return Err("an unterminated value".to_owned());
    }
    let end = text.find(' ').unwrap_or(text.len());
    let (bare, rest) = text.split_at(end);
    let value = match bare {
        "null" => Value::Null,
        _ => {
            let bits = bare.strip_prefix("B'").and_then(|b| b.strip_suffix('\''));
            Value::String(bits.unwrap_or(bare).to_owned())
        }
    };
    Ok((value, rest))
}

/// The start of `text`, for an error: the change's table and columns, never many values.
fn excerpt(text: &str) -> String {
    text.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_insert_keeps_every_value_as_text() {
        let line = "table public.partner_orders: INSERT: organization_id[text]:'org' id[text]:'o1' \
                    providers[text[]]:'{meta,\"goo gle\"}' advertiser_name[text]:'A''s \"x\" new-tuple: y' \
                    budget_dkk[bigint]:100 created_at[timestamp with time zone]:'2026-11-27 18:31:04.353+00' \
                    \"position\"[bigint]:null \"we\"\"ird\"[bit(4)]:B'0101'";
        let change = row_change(line).unwrap().unwrap();
        assert_eq!(change.table, "public.partner_orders");
        assert_eq!(change.operation, Operation::Insert);
        assert_eq!(change.old, None);
        assert_eq!(
            Value::Object(change.new.unwrap()),
            json!({
                "organization_id": "org", "id": "o1", "providers": "{meta,\"goo gle\"}",
                "advertiser_name": "A's \"x\" new-tuple: y", "budget_dkk": "100",
                "created_at": "2026-11-27 18:31:04.353+00", "position": null, "we\"ird": "0101"
            })
        );
    }

    #[test]
    fn an_update_has_both_rows_and_an_unlogged_value_is_the_old_one() {
        let line =
            "table \"my schema\".\"Orders: x\": UPDATE: old-key: id[text]:'o1' note[text]:'long' \
                    new-tuple: id[text]:'o2' note[text]:unchanged-toast-datum";
        let change = row_change(line).unwrap().unwrap();
        assert_eq!(change.table, "\"my schema\".\"Orders: x\"");
        assert_eq!(
            Value::Object(change.old.unwrap()),
            json!({"id": "o1", "note": "long"})
        );
        assert_eq!(
            Value::Object(change.new.unwrap()),
            json!({"id": "o2", "note": "long"})
        );
    }

    #[test]
    fn a_delete_without_data_and_a_truncate_are_told_apart() {
        let delete = row_change("table public.t: DELETE: (no-tuple-data)")
            .unwrap()
            .unwrap();
        assert_eq!(
            (delete.operation, delete.old, delete.new),
            (Operation::Delete, None, None)
        );
        assert_eq!(
            row_change("table public.t: TRUNCATE: (no-flags)").unwrap(),
            None
        );
        let update = row_change("table public.t: UPDATE: id[integer]:1")
            .unwrap()
            .unwrap();
        assert_eq!(update.old, None);
        assert!(row_change("table public.t: INSERT: id[text]:'open").is_err());
        assert!(row_change("table public.t: UPDATE: old-key: id[text]:'x'").is_err());
        assert!(row_change("BEGIN 12").is_err());
    }
}
