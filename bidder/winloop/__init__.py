"""The win loop: notices, billing, the deferred-notice journal, the spend spool and
stream, and the ledger archive."""
