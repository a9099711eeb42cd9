//! What the crate writes to the log beyond single values: an error with its chain of sources,
//! and the fields it records in the host's request span.

use std::fmt;

/// Displays an error with its chain of sources, for the log.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// Records `value()` as the field `name` of the current span: the host's request span, when it
/// declares the field (see the crate docs on logging). Where no tracing subscriber was ever
/// set there is no span to record in, and nothing is looked up (a thread-local lookup and a
/// reference count per field otherwise).
pub(crate) fn record_in_request_span<V: tracing::Value>(name: &str, value: impl FnOnce() -> V) {
    if !tracing::dispatcher::has_been_set() {
        return;
    }
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record(name, value());
    }
}
