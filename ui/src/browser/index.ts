// The browser area: the panel beside the chat, the health card of the settings page, and the
// result view of bifrostNavigator calls (for the chat's tool-result registry).
export { BrowserHealthCard } from "./BrowserHealthCard";
export { BrowserPanel } from "./BrowserPanel";
export { NavigatorResult } from "./NavigatorResult";
