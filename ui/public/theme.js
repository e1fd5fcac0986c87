// The colour scheme picked in the header (src/common/theme.ts), set on <html> before the first
// paint so a reload never shows the other scheme first. A classic file, not an inline script:
// the gateway's CSP allows scripts from 'self' only.
try {
  const theme = localStorage.getItem("popagent.theme");
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
} catch (error) {
  // No storage (private mode, blocked): the system's scheme.
}
