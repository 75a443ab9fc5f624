"""The operator's web dashboard (`scrapefleet dashboard`): Flask, rendered on the server.

Pages read the database through ``reads``; controls change it only through common.jobstore,
and only with the dashboard token. See ``app.create_app``.
"""
