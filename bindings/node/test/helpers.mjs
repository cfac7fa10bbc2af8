// Contexts and servers the tests share.
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

/** bindings/fixtures: the table and DSL rules every binding shares. */
export const FIXTURES = path.resolve(here, '..', '..', 'fixtures');

/** The real OPA-built bundles: $PORTCULLIS_OPA_FIXTURES, else ../shared/fixtures beside the repository. */
export const OPA_FIXTURES =
  process.env.PORTCULLIS_OPA_FIXTURES ?? path.resolve(here, '..', '..', '..', '..', 'shared', 'fixtures');

export const metadata = (extra = {}) => ({
  agent_id: 'agent-1',
  session_id: 's-1',
  timestamp: '2026-01-01T00:00:00Z',
  ...extra,
});

export const input = (...texts) => ({
  messages: texts.map((content) => ({ role: 'user', content })),
  metadata: metadata(),
});

export const toolCall = (tool_name, args = {}) => ({
  tool_name,
  arguments: args,
  calling_message: { role: 'assistant', content: `calling ${tool_name}` },
  metadata: metadata(),
});

export const output = (content) => ({
  response: { role: 'assistant', content },
  metadata: metadata(),
});

/** Reads a request's JSON body. */
export function readJson(request) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch (error) {
        reject(error);
      }
    });
    request.on('error', reject);
  });
}

/**
 * A real HTTP server on a free port of 127.0.0.1, in this process: `handle(request, body)`
 * returns the JSON to answer. Resolves to `{ baseUrl, requests, close }`.
 */
export async function jsonServer(handle) {
  const requests = [];
  const server = http.createServer(async (request, response) => {
    try {
      const body = request.method === 'POST' ? await readJson(request) : undefined;
      requests.push({ method: request.method, url: request.url, body });
      const answer = await handle(request, body);
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(answer));
    } catch (error) {
      response.writeHead(500, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ message: String(error) }));
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}

export const toolResult = (tool_name, content, extra = {}) => ({
  tool_name,
  content,
  metadata: metadata(),
  ...extra,
});

/** cli/tests/fixtures/tool-result: the untrusted-content manifest and its rules. */
export const TOOL_RESULT_FIXTURES = path.resolve(here, '..', '..', '..', 'cli', 'tests', 'fixtures', 'tool-result');

/**
 * A real `redis-server` on a free port of 127.0.0.1, without persistence: `{ url, stop }`, or
 * `undefined` when it cannot be started (the test then skips), unless PORTCULLIS_REQUIRE_REDIS
 * is set (the test command sets it), which throws instead.
 */
export async function redisServer() {
  const required = (process.env.PORTCULLIS_REQUIRE_REDIS ?? '0') !== '0';
  const port = await new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(free));
    });
  });
  const child = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  const started = await new Promise((resolve) => {
    child.once('spawn', () => resolve(true));
    child.once('error', () => resolve(false));
  });
  if (!started) {
    if (required) throw new Error('redis-server is not installed (scripts/test installs it)');
    return undefined;
  }
  const stop = () => new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
  const deadline = Date.now() + 10_000;
  for (;;) {
    const answered = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
      socket.setTimeout(1000, () => socket.destroy());
      socket.once('data', (data) => {
        resolve(data.toString().startsWith('+PONG'));
        socket.destroy();
      });
      socket.once('error', () => resolve(false));
      socket.once('close', () => resolve(false));
    });
    if (answered) return { url: `redis://127.0.0.1:${port}/0`, stop };
    if (Date.now() > deadline) {
      await stop();
      throw new Error('redis-server did not answer within 10 s');
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
