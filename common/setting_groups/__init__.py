"""The settings' fields by group, one module a domain: each field with its default, its bounds,
its description (the settings reference) and its own checks. common.settings puts them together
into Settings and loads it; nothing else imports these modules.
"""
