#!/usr/bin/env node
// The demo local agent cli-agent runs when CLI_AGENT_COMMAND is empty. It speaks agent-host's
// JSON-lines protocol (see agents/README.md): one JSON object per line on stdin and stdout.
// It answers each user message with the message's words reversed, a word at a time, and keeps
// count of the conversation, so a resumed session shows it remembers.
import { createInterface } from 'node:readline'

const send = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
let seen = 0

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === '') continue
  const input = JSON.parse(line)
  seen += input.messages.length
  if (input.type !== 'messages') continue
  const last = input.messages.at(-1)?.content ?? ''
  send({ type: 'reasoning', text: `Message ${seen} of this session, in ${process.cwd().split('/').at(-1)}.` })
  const words = String(last).split(/\s+/).filter((w) => w !== '').reverse()
  for (const [i, word] of words.entries()) {
    send({ type: 'text', text: (i === 0 ? '' : ' ') + word })
    await sleep(20)
  }
  send({ type: 'result', usage: { input: String(last).split(/\s+/).filter(Boolean).length, output: words.length }, stop_reason: 'end_turn' })
}
