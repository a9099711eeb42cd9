-- A host application's own table, migrated by its own sqlx Migrator.
CREATE TABLE host_users (id BIGINT PRIMARY KEY, email TEXT NOT NULL);
