//! What the PostgreSQL benches share.

use sqlx::{Connection, Executor, PgConnection};

/// Creates the database `name` on the server of the URL `admin`, and returns the connection
/// that created it (to drop it with at the end) and the new database's URL.
pub(crate) async fn scratch_database(admin: &str, name: &str) -> (PgConnection, String) {
    let mut connection = PgConnection::connect(admin).await.expect("connect");
    connection
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create database");
    let url = format!(
        "{}/{name}",
        admin.rsplit_once('/').expect("a database URL").0
    );
    (connection, url)
}
