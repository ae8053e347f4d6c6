"""The HTTP edge: the FastAPI app that mounts every domain's endpoints and the dashboard, the request
dependencies (`deps`: the caller, the `Gateway` value), health and metrics endpoints, the API docs."""
