import t from 'tap'
import { CONTRACT_VERSION, checkCompatibility, incompatibility } from '../../src/agents/contract-version.js'
import { createAjv } from '../../src/agents/json-schema.js'
import { AgentInput, AgentOutput, ExecutionPlan } from '../../src/protocol/contract.js'
import { build } from '../helper.js'

t.test('checkCompatibility: the major matches, the agent\'s minor may be higher, patch and pre-release tags are ignored', async (t) => {
  const cases: Array<[agent: string, contract: string, compatible: boolean]> = [
    ['2.0.0', '2.0.0', true],
    ['2.0.7', '2.0.0', true], // patch ignored
    ['2.0.0', '2.0.9', true], // patch ignored, both ways
    ['2.1.0', '2.0.0', true], // a newer minor
    ['2.10.0', '2.9.0', true], // numeric, not lexical: 10 > 9
    ['2.9.0', '2.10.0', false], // and 9 < 10
    ['2.0.0', '2.1.0', false], // an older minor lacks what 2.1 promises
    ['3.0.0', '2.0.0', false], // another major
    ['1.9.9', '2.0.0', false],
    ['2.1.0-beta.1', '2.0.0', true], // a pre-release of a newer minor
    ['2.0.0-rc.1', '2.0.0', true], // pre-release tag ignored like patch
    ['3.0.0-alpha', '2.0.0', false], // a pre-release of the next major is that major
    ['0.3.0', '0.3.1', true], // below 1.0.0 the minors must match
    ['0.4.0', '0.3.0', false],
    ['v2.0.0', '2.0.0', true], // the conventional leading v
    ['2.0', '2.0.0', false], // malformed
    ['2', '2.0.0', false],
    ['2.0.0.1', '2.0.0', false],
    ['', '2.0.0', false],
    ['two', '2.0.0', false],
    ['2.0.0', 'not-a-version', false]
  ]
  for (const [agent, contract, compatible] of cases) t.equal(checkCompatibility(agent, contract), compatible, `${agent} on ${contract}`)
})

t.test('the host implements contract 2.0.0; incompatibility names both versions', async (t) => {
  t.equal(CONTRACT_VERSION, '2.0.0')
  t.equal(incompatibility('2.3.1'), undefined)
  t.match(incompatibility('1.4.0'), /written for contract 1\.4\.0.*implements contract 2\.0\.0/)
  t.match(incompatibility('2.0'), /"2\.0" is not a semantic version.*2\.0\.0/)
})

t.test('the contract\'s schemas are OpenAPI components, and they hold the seed\'s shapes', async (t) => {
  const app = await build(t, { WORKERS_PER_TYPE: '0' })
  const doc = (await app.inject('/openapi.json')).json() as { components: { schemas: Record<string, unknown> } }
  for (const name of ['AgentInput', 'AgentOutput', 'Artifact', 'ContractEvent', 'Insight', 'ExecutionPlan', 'PlanTask', 'ChangedFile', 'DiffStats', 'Metric', 'EvaluationReport', 'ToolCall', 'ToolResponse', 'A2ARequest', 'A2AResponse', 'EventSubscription', 'EventPublication', 'ResearchAgentInput', 'PlannerAgentOutput', 'RefactorAgentInput', 'EvaluatorAgentOutput']) {
    t.ok(doc.components.schemas[name], `${name} is a component`)
  }
  t.match(doc.components.schemas.AgentOutput, { properties: { artifacts: { items: { $ref: '#/components/schemas/Artifact' } }, events: { items: { $ref: '#/components/schemas/ContractEvent' } } } })
  const ajv = createAjv()
  const output = ajv.compile(AgentOutput)
  t.ok(output({ task_id: 't1', status: 'ok', artifacts: [{ kind: 'report', ref: 'reports/r.md' }], metrics: { files: 3 }, events: [{ type: 'research.complete', key: 'r1', data: { insights: [] }, visibility: 'a2a' }], next_tasks: [{ type: 'plan' }] }), JSON.stringify(output.errors))
  t.notOk(output({ task_id: 't1', status: 'done' }), 'a status outside ok | retry | fail')
  t.notOk(output({ task_id: 't1', status: 'ok', events: [{ type: 'not a dotted type', key: 'k', data: 1 }] }), 'an event type must be dotted words')
  t.notOk(output({ task_id: 't1', status: 'ok', metrics: { files: 'three' } }), 'metrics are numbers')
  const input = ajv.compile(AgentInput)
  t.ok(input({ intent: 'research', task_id: 't1', payload: { target_path: 'agents' }, constraints: { timeout: 30 } }))
  t.notOk(input({ intent: 'research', payload: {} }), 'task_id is required')
  const plan = ajv.compile(ExecutionPlan)
  t.notOk(plan({ id: 'p1', tasks: [{ id: 'a', type: 'code', description: '', estimated_hours: 1, priority: 11, assigned_agent: 'refactor', input_artifacts: [], output_artifacts: [], success_criteria: {} }], dependencies: {} }), 'priority is 1-10')
})
