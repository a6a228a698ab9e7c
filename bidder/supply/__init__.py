"""Supply-chain checks: schain against sellers.json, domain and bundle against
ads.txt / app-ads.txt, the files' cache, and the ranking of supply paths."""
