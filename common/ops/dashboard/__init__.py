"""The operator's web dashboard (`scrapefleet dashboard`): Flask, rendered on the server.

Pages read the database through ``reads``; controls change it only through scrapefleet.common.store,
and only with the dashboard token. See ``app.create_app``.
"""
