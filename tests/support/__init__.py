"""What the tests share: `harness` (the provisioned world: the simulator and gateway handles, numbers,
sign-in, Meta's webhook bodies, waiting), `app_in_thread` (the real app on a socket in this process),
`gateway_process` (`wagate serve` and `wagate worker` as processes of their own), `receiver` (an
account webhook receiver), `crash_matrix` (runs of sends with SIGKILLs, and their counts), and the walk
of every operation and page as other tenants: `tenant_accounts` (who walks, account A's data),
`tenant_walk` (the engine and the judge), `tenant_walk_api`, `tenant_walk_pages`."""
