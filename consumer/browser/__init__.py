"""The consumer's browser: the stack (Xvfb, Grid, Chromium) and its supervisor, warm sessions,
the built-in browser actions, network evidence and failure artifacts. It never imports the claim
loop (scrapefleet.consumer's daemon modules): the daemon drives it, not the other way round."""
