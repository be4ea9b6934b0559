"""The SQLite system of record: connection settings, migrations, reads and writes."""
