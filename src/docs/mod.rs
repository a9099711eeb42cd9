//! The reference pages: the contract the API keeps, how it behaves where the contract is
//! silent, and how to host, store, measure and secure it. Each page is a markdown file in
//! `src/docs/`, readable on its own in the repository.

pub mod contract {
    #![doc = include_str!("contract.md")]
}
pub mod versions {
    #![doc = include_str!("versions.md")]
}
pub mod behaviour {
    #![doc = include_str!("behaviour.md")]
}
pub mod hosting {
    #![doc = include_str!("hosting.md")]
}
pub mod stores {
    #![doc = include_str!("stores.md")]
}
pub mod host_data {
    #![doc = include_str!("host_data.md")]
}
pub mod performance {
    #![doc = include_str!("performance.md")]
}
pub mod security {
    #![doc = include_str!("security.md")]
}
pub mod development {
    #![doc = include_str!("development.md")]
}
pub mod keys {
    #![doc = include_str!("keys.md")]
}
pub mod settings {
    #![doc = include_str!("settings.md")]
}
pub mod replicas {
    #![doc = include_str!("replicas.md")]
}
pub mod metrics {
    #![doc = include_str!("metrics.md")]
}
pub mod webhooks {
    #![doc = include_str!("webhooks.md")]
}
