//! Driver errors as [`StoreError`]s: classified by what the API answers, and stripped of
//! what must not reach a log.

use std::fmt;

use crate::store::{StoreError, StoreErrorKind};

/// Classifies a driver error by what the API answers. A database's own error keeps only its
/// SQLSTATE, message and constraint: PostgreSQL's detail text quotes the values of a violated
/// constraint (for a duplicate key, the key's digest), and no log may carry a digest.
pub(crate) fn store_error(err: sqlx::Error) -> StoreError {
    use sqlx::Error;
    let unavailable = match &err {
        Error::PoolTimedOut | Error::PoolClosed | Error::Io(_) | Error::Tls(_) => true,
        Error::WorkerCrashed => true,
        // Class 08 (connection exception), 53 (insufficient resources), 57 (operator
        // intervention: statement timeout, shutdown) are the database being unavailable.
        Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || code.starts_with("53") || code.starts_with("57")
        }),
        _ => false,
    };
    let decoding = matches!(
        err,
        Error::ColumnDecode { .. }
            | Error::Decode(_)
            | Error::ColumnNotFound(_)
            | Error::TypeNotFound { .. }
    );
    let Error::Database(db) = &err else {
        return if unavailable {
            StoreError::unavailable(err)
        } else if decoding {
            StoreError::invalid_data(err)
        } else {
            StoreError::other(err)
        };
    };
    let database = DatabaseError {
        code: db.code().map(|code| code.into_owned()),
        message: db.message().to_owned(),
        constraint: db.constraint().map(str::to_owned),
    };
    match database.code.as_deref() {
        _ if unavailable => StoreError::unavailable(database),
        // unique_violation: the thing exists.
        Some("23505") => StoreError::conflict(database),
        // foreign_key_violation: what it refers to (an organization) does not.
        Some("23503") => StoreError::not_found(database),
        // check_violation, not_null_violation, invalid text: data that breaks the schema.
        Some(code) if code.starts_with("22") || code == "23514" || code == "23502" => {
            StoreError::invalid_data(database)
        }
        _ => StoreError::other(database),
    }
}

/// Whether `err` is a lock that was not had in time (`55P03`, `lock_not_available`: a
/// `lock_timeout` ran out).
pub(crate) fn is_lock_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
}

/// Whether `err` is an object another session holds (`55006`, `object_in_use`: a
/// replication slot being read).
pub(crate) fn is_object_in_use(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("55006"))
}

/// Whether `err` is an object that does not exist (`42704`, `undefined_object`: a replication
/// slot dropped meanwhile).
pub(crate) fn is_undefined_object(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("42704"))
}

/// Whether `err` says the database cannot be reached (a connection that fails or breaks, a
/// pool that times out, the server shutting down), as opposed to one slow statement
/// (`57014`, a statement timeout) that says nothing of the others.
pub(crate) fn is_unreachable(err: &StoreError) -> bool {
    if err.kind() != StoreErrorKind::Unavailable {
        return false;
    }
    let database =
        std::error::Error::source(err).and_then(|source| source.downcast_ref::<DatabaseError>());
    database.is_none_or(|database| database.code.as_deref() != Some("57014"))
}

/// Whether `err` is a pool that timed out waiting for a connection.
pub(crate) fn is_pool_timeout(err: &StoreError) -> bool {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<sqlx::Error>())
        .is_some_and(|err| matches!(err, sqlx::Error::PoolTimedOut))
}

/// What is kept of a database's own error: never its detail or its query parameters.
#[derive(Debug)]
pub(crate) struct DatabaseError {
    code: Option<String>,
    message: String,
    constraint: Option<String>,
}

impl fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "database error")?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(constraint) = &self.constraint {
            write!(f, " (constraint {constraint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for DatabaseError {}
