"""The results viewer: job folders read lazily (`jobs`, `lines`, `trajectory`) and the
local web app over them (`server`, `static/`). Importing this package loads no web code;
`sandlot.viewer.server` does.
"""
