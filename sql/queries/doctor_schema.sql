-- doctor_schema: the newest migration applied to the schema, for outboxctl doctor.
SELECT coalesce(max(version), 0) AS schema_version FROM /*schema*/schema_migrations
