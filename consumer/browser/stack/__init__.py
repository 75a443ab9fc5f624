"""One browser stack (Xvfb, Selenium Grid, Chromium): its processes started, watched and ended,
here or through the browser agent, and the WebDriver sessions its Grid opens."""
