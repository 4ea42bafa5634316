import neostandard from 'neostandard'
import globals from 'globals'

export default [
  ...neostandard({
    ts: true,
    ignores: ['dist/**', 'client/dist/**', 'coverage/**', '.tap/**', 'data/**', 'bench/results/**']
  }),
  {
    // TypeBox's idiom: a schema constant and its Static<> type share one name.
    files: ['src/protocol/**/*.ts'],
    rules: { '@typescript-eslint/no-redeclare': 'off' }
  },
  {
    // the MCP SDK is loaded by the first MCP request or tool call (routes/mcp.ts, tools/mcp-sdk.ts), not
    // when the host boots: elsewhere only its types, and those of the modules that use it, are imported
    files: ['src/**/*.ts'],
    ignores: ['src/mcp/server.ts', 'src/mcp/sessions.ts', 'src/mcp/tasks.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': ['error', {
        patterns: [{
          group: ['@modelcontextprotocol/sdk/*', '**/mcp/server.js', '**/mcp/sessions.js', '**/mcp/tasks.js'],
          allowTypeImports: true,
          message: 'load the MCP SDK when it is first used (await import), so that a host that does not speak MCP does not load it at boot'
        }]
      }]
    }
  },
  {
    // the playground's page runs in the browser
    files: ['playground/**/*.js', 'playground/**/*.jsx'],
    languageOptions: { globals: globals.browser }
  }
]
