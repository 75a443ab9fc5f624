"""The settings' fields by group, one module a domain: each field with its default, its bounds,
its description (the settings reference) and its own checks. common.settings puts them together
into Settings and loads it; everything else reads Settings, never a group (the import contract
holds it; the tools for people aside, whose CLI reads the host-name rule of operator_settings).
"""
