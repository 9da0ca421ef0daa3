"""Real local services the tests run against, on 127.0.0.1 (PostgreSQL, a GCS emulator, ...)."""
