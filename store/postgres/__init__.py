"""The PostgreSQL backend of the store, for a fleet of replicas sharing one database: blob
contents in rows (`blobs`), named documents such as the vault under a row lock
(`documents`), and the connections of their own that the fleet's claim and notices hold
outside the records' pool (`connections`). The records themselves run on either database
through one schema (`store/schema.py`, `store/database/`); the fleet's coordination over
PostgreSQL (claims, notices, fencing) is `store/fleet/`.

Importing a module here loads psycopg or PostgreSQL's SQL dialect; the SQLite default never
does (`server/config.py` imports these only for a `postgresql://` store).
"""
