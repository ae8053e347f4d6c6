"""What the services, the pages and the dispatcher share while running: the `Gateway` value (database,
settings, secrets, Cloud API client, caches, dispatcher, live changes). It sits below the domains and
holds no FastAPI: a service can be called from a request, a page, the CLI or a test alike."""
