# syntax=docker/dockerfile:1
# Node.js 24 (24.18.1 in both stages), the current LTS (the package also runs on Node 20: see "Supported runtimes" in the README).
# test/deploy/dockerfile.test.ts runs this file's steps outside Docker, so a broken step fails CI.

# Build stage: the same steps as CI (npm ci, build), then drop the dev dependencies. Node 24.18.1 here,
# because better-sqlite3 12 compiled against Node >= 24.19's headers aborts in Statement::~Statement
# (nodejs/node#65446); compiled against 24.18.1's it runs on every 24.x, as in the runtime stage below.
# (better-sqlite3 13 fixes it but needs Node 22; the package still supports Node 20.)
FROM node:24.18.1-bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
COPY client/package.json ./client/package.json
RUN npm ci
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.ts ./scripts/build.ts
COPY src ./src
COPY agents ./agents
COPY client ./client
# the playground's chat page, which the build bundles (React, the AI SDK) into dist/playground/chat.js
COPY playground ./playground
RUN npm run build && npm prune --omit=dev

# Runtime stage: production dependencies, the compiled server and agents, and the playground, as a non-root user.
# The same release as the build stage, which compiled better-sqlite3's addon against it.
FROM node:24.18.1-bookworm-slim
# tini is PID 1: it reaps the subprocesses agents spawn (cli-agent) and passes SIGTERM on to node
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    AUTH_MODE=apikey \
    PORT=3000 \
    DATA_DIR=/app/data
WORKDIR /app
COPY --from=build --chown=node:node /app/package.json ./package.json
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/dist ./dist
# the playground: its page, the built client it runs on (node_modules/@agent-host/client links here), the protocol it links
COPY --from=build --chown=node:node /app/client/package.json ./client/package.json
COPY --from=build --chown=node:node /app/client/dist ./client/dist
COPY --chown=node:node playground ./playground
COPY --chown=node:node docs ./docs
# the data volume belongs to node (uid 1000): a bind mount must too (the server says so at boot if not);
# agents mounted anywhere (AGENTS_DIR=/agents) import the authoring API as 'agent-host' through /node_modules
RUN mkdir -p /app/data /node_modules \
 && chown node:node /app/data \
 && ln -s /app /node_modules/agent-host
USER node
VOLUME ["/app/data"]
EXPOSE 3000
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["/usr/bin/tini", "--"]
# node, not npm, so that SIGTERM reaches the server and its graceful shutdown
CMD ["node", "--enable-source-maps", "dist/src/server.js"]
