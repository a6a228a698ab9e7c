"""The local servers the project starts itself: embedded Valkey (single or a local
Cluster) and the moto server, as child processes that die with their parent."""
