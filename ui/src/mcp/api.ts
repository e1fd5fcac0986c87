// /api/mcp-servers: users' MCP servers, whose tools the agents granted them get as mcp__<server>__<tool>.
import { done, http, unwrap } from "../api/client";
import type { McpServerCreate, McpServerPatch } from "../api/types";

const server = (serverId: string) => ({ params: { path: { server_id: serverId } } });

export const mcpServersApi = {
  list: () => unwrap(http.GET("/api/mcp-servers")),
  create: (body: McpServerCreate) => unwrap(http.POST("/api/mcp-servers", { body })),
  update: (serverId: string, body: McpServerPatch) => unwrap(http.PATCH("/api/mcp-servers/{server_id}", { ...server(serverId), body })),
  remove: (serverId: string) => done(http.DELETE("/api/mcp-servers/{server_id}", server(serverId))),
  test: (serverId: string) => unwrap(http.POST("/api/mcp-servers/{server_id}/test", server(serverId))),
  // The authorization URL of an OAuth server, to open in a window of its own.
  startOAuth: (serverId: string) => unwrap(http.POST("/api/mcp-servers/{server_id}/oauth/start", server(serverId))),
};
