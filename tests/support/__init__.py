"""What the tests share: `harness` (the provisioned world: the simulator and gateway handles, numbers,
sign-in, Meta's webhook bodies, waiting), `app_in_thread` (the real app on a socket in this process),
`gateway_process` (`wagate serve` and `wagate worker` as processes of their own), `receiver` (an
account webhook receiver), `crash_matrix` (runs of sends with SIGKILLs, and their counts)."""
