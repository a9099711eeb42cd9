//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! folder's files at compile time, and cargo does not otherwise look at it.
fn main() {
    println!("cargo:rerun-if-changed=src/store/migrations");
}
