//! [`Report`]: what a suite found, and the helpers its checks share.

use std::fmt;

use crate::store::{StoreError, StoreErrorKind};

/// The outcome of a suite ([`run`](super::run), [`run_rate_limiter`](super::run_rate_limiter)): each check's name and, if it failed, why.
#[derive(Debug, Default)]
pub struct Report {
    pub(super) results: Vec<(&'static str, Result<(), String>)>,
}

impl Report {
    /// Returns the names and messages of the failed checks.
    pub fn failures(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.results
            .iter()
            .filter_map(|(name, result)| result.as_ref().err().map(|err| (*name, err.as_str())))
    }

    /// Returns the number of checks run.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// Returns whether no check ran.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    /// Panics, listing every failed check, unless all passed.
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(
            self.failures().next().is_none(),
            "conformance failed:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, result) in &self.results {
            match result {
                Ok(()) => writeln!(f, "ok     {name}")?,
                Err(why) => writeln!(f, "FAILED {name}: {why}")?,
            }
        }
        Ok(())
    }
}

/// A check's outcome: passed, or why not.
pub(super) type Check = Result<(), String>;

/// Fails the check with a message unless `$condition` holds.
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

/// Turns a store error into a check failure that says what failed.
pub(super) fn failed(what: &str) -> impl FnOnce(StoreError) -> String + '_ {
    move |err| format!("{what}: {}", crate::log::ErrorChain(&err))
}

pub(super) use ensure;

/// The kind of a store call's error, if it failed.
pub(super) fn kind_of<T>(result: Result<T, StoreError>) -> Option<StoreErrorKind> {
    result.err().map(|err| err.kind())
}
