"""The ground floor: settings, the database and its units of work, secrets, ids, phone numbers,
caches, the error base, the price list, live changes, migrations. Imports nothing of the layers above."""
