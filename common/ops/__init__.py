"""Tools for people: the admin CLI and the dashboard. They sit above the library and may use
the producer's probe; the library never imports them."""
