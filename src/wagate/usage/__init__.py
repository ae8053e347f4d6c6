"""Usage: messages and their cost per day, channel and category (API.md section 11, issue 12 point 5)."""
