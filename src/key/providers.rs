//! The providers a key may read the orders of: a key limited to providers sees exactly the
//! orders whose `providers` include one of them. The list is kept canonical (sorted, without
//! repeats), so two keys limited alike compare, cache and tag alike.

/// The most providers one key may be limited to.
pub const MAX_KEY_PROVIDERS: usize = 50;
/// The longest provider id a key may name, in characters.
pub const MAX_PROVIDER_CHARS: usize = 100;

/// `providers` as a key keeps them: sorted, each once; or why they cannot limit a key (none
/// at all, more than [`MAX_KEY_PROVIDERS`], an empty id, one over [`MAX_PROVIDER_CHARS`]
/// characters or with a control character).
///
/// # Errors
///
/// The message for the caller, naming the offending id.
pub fn canonical_providers<S: AsRef<str>>(providers: &[S]) -> Result<Vec<String>, String> {
    if providers.is_empty() {
        return Err("a key limited to providers names at least one".to_owned());
    }
    let mut kept: Vec<String> = Vec::with_capacity(providers.len());
    for provider in providers {
        let provider = provider.as_ref();
        if provider.is_empty()
            || provider.chars().count() > MAX_PROVIDER_CHARS
            || provider.chars().any(char::is_control)
        {
            return Err(format!(
                "provider {provider:?} must be 1 to {MAX_PROVIDER_CHARS} characters without control characters"
            ));
        }
        kept.push(provider.to_owned());
    }
    kept.sort_unstable();
    kept.dedup();
    if kept.len() > MAX_KEY_PROVIDERS {
        return Err(format!(
            "a key may be limited to at most {MAX_KEY_PROVIDERS} providers"
        ));
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_are_sorted_once_each_and_refused_when_they_cannot_be_an_id() {
        assert_eq!(
            canonical_providers(&["meta", "google", "meta"]).unwrap(),
            ["google", "meta"]
        );
        assert!(canonical_providers::<&str>(&[]).is_err());
        assert!(canonical_providers(&[""]).is_err());
        assert!(canonical_providers(&["a\nb"]).is_err());
        let many: Vec<String> = (0..=MAX_KEY_PROVIDERS).map(|n| format!("p{n}")).collect();
        assert!(canonical_providers(&many).is_err());
    }
}
