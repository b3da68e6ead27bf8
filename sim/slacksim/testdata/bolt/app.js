// A Bolt app as anyone would write one for Slack, pointed at the
// stand-in: it answers a mention in the mention's thread. Run by
// bolt_test.go with BOLT_DIR (where @slack/bolt is installed), MODE
// (socket or http), SLACK_API_URL, SLACK_BOT_TOKEN and SLACK_APP_TOKEN
// or SLACK_SIGNING_SECRET. It prints one JSON line once it is ready.
const path = require('path');
const { App, LogLevel } = require(path.join(process.env.BOLT_DIR, 'node_modules', '@slack', 'bolt'));

const api = { slackApiUrl: process.env.SLACK_API_URL };
const socket = process.env.MODE === 'socket';
const app = new App({
  token: process.env.SLACK_BOT_TOKEN,
  logLevel: LogLevel.WARN,
  clientOptions: api,
  ...(socket
    ? { socketMode: true, appToken: process.env.SLACK_APP_TOKEN, installerOptions: { clientOptions: api } }
    : { signingSecret: process.env.SLACK_SIGNING_SECRET }),
});

app.event('app_mention', async ({ event, say, client }) => {
  await client.reactions.add({ channel: event.channel, timestamp: event.ts, name: 'eyes' });
  await say({ text: `on it (${process.env.MODE}): ${event.text}`, thread_ts: event.ts });
});

app.error(async (err) => {
  console.error('bolt error:', err);
});

(async () => {
  const server = await app.start(socket ? undefined : 0);
  const port = socket ? 0 : server.address().port;
  console.log(JSON.stringify({ ready: true, port }));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});

process.on('SIGTERM', async () => {
  await app.stop().catch(() => {});
  process.exit(0);
});
