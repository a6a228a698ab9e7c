"""Clients of outside systems: Valkey (redis-py and the auto-pipelined connection),
AWS through boto3, and the campaign store."""
