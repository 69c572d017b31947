"""HTTP routers, one module per resource: the core (links, joining, admin dashboard) and the
study pages for participants and administrators."""
