// /api/channels: Slack, Telegram and Discord bots whose conversations are chat sessions (docs/channels.md).
import { done, http, unwrap } from "../api/client";
import type { ChannelCreate, ChannelPatch } from "../api/types";

const channel = (channelId: string) => ({ params: { path: { channel_id: channelId } } });

export const channelsApi = {
  list: () => unwrap(http.GET("/api/channels")),
  create: (body: ChannelCreate) => unwrap(http.POST("/api/channels", { body })),
  update: (channelId: string, body: ChannelPatch) =>
    unwrap(http.PATCH("/api/channels/{channel_id}", { ...channel(channelId), body })),
  remove: (channelId: string) => done(http.DELETE("/api/channels/{channel_id}", channel(channelId))),
  history: (channelId: string) =>
    unwrap(http.GET("/api/channels/{channel_id}/history", { params: { path: { channel_id: channelId }, query: { limit: 30 } } })),
};

/** The URL the platform's console takes: this page's own origin, as the user reaches popagent. */
export const webhookUrl = (channelId: string) => `${window.location.origin}/api/channels/${channelId}/events`;
