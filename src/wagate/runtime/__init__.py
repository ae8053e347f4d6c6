"""What the API and the dispatcher share while running: short-lived caches of what every request looks up."""
