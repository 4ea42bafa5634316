import type { Test, TAP } from 'tap'
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser, type Page } from 'playwright-core'
import { harnessFreeEnv } from './child-env.js'
import { needsPrograms } from './host-programs.js'

/** Debian's chromium (CI installs it: .ci/run); playwright-core drives it and never downloads one. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

/** A page test's `skip`: a machine without the browser says what is missing instead of failing (test/host-programs.ts). */
export const skipWithoutBrowser: string | false = needsPrograms(['chromium'], { ...process.env, CHROMIUM_PATH: CHROMIUM })

/**
 * Build the client (client/dist), which the playground page runs as `npm start` serves it; without
 * V8's coverage, which covers none of our code and made tsc some 45 % slower.
 */
export function buildClient (): void {
  execFileSync(process.execPath, [fileURLToPath(import.meta.resolve('typescript/bin/tsc')), '-p', 'client/tsconfig.json'], { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: 'inherit', env: harnessFreeEnv() })
}

/** One headless browser for a whole test file (a launch costs a second or more of CPU). */
export async function launchBrowser (): Promise<Browser> {
  return await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] })
}

/** A fresh page in a context of its own that records every request it makes and every console error. */
export async function openPage (t: Test, browser: Browser, url: string): Promise<{ page: Page, requests: string[], errors: string[] }> {
  const context = await browser.newContext()
  t.teardown(async () => { await context.close() })
  const page = await context.newPage()
  const requests: string[] = []
  const errors: string[] = []
  page.on('request', (r) => { requests.push(r.url()) })
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()) })
  page.on('pageerror', (e) => { errors.push(e.message) })
  await page.goto(url)
  return { page, requests, errors }
}

/**
 * What a page test file shares: one browser (the client built first, so the page runs what
 * `npm start` serves), launched before its first test and closed after its last, and `open`, a fresh
 * page of it; `skip` for each test on a machine without the browser.
 */
export function pageTests (file: Pick<TAP, 'before' | 'teardown'>): { skip: string | false, open: (t: Test, url: string) => ReturnType<typeof openPage> } {
  let browser: Browser | undefined
  file.before(async () => {
    if (skipWithoutBrowser !== false) return
    buildClient()
    browser = await launchBrowser()
  })
  file.teardown(async () => { await browser?.close() })
  return { skip: skipWithoutBrowser, open: async (t, url) => await openPage(t, browser as Browser, url) }
}
