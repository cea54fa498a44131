// The theme the user picked last (console.js's toggle stores it), applied in <head> before the
// first paint so that a dark page does not flash white. Nothing stored: the CSS follows
// prefers-color-scheme.
try {
  const theme = localStorage.getItem("routernet-theme");
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
} catch {
  // localStorage refused (private mode, file: URL): the system's theme it is.
}
