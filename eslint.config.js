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
    // the playground's page runs in the browser
    files: ['playground/**/*.js'],
    languageOptions: { globals: globals.browser }
  }
]
