"""The browser group: `bifrostNavigator` and `useBrowserSecret`, through browser-bridge (`browser/access.py`)."""
