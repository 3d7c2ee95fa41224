// A behavior plugin: /plugin/greeter/hello greets by name, for any caller holding that
// capability (the node itself, its roots, those it granted it), and GET
// /api/v1/plugins/greeter/hello/:name asks it over an envelope from the plugin's own actor.
// The greeting comes from the node config: plugins.config.greeter.greeting.
import { definePlugin, invalid, z } from 'dms/plugin';

const Hello = z.object({ name: z.string().min(1).max(100) });
const Greeting = z.object({ greeting: z.string(), from: z.string() });

let greeted = 0;

export default definePlugin({
  name: 'greeter',
  behaviors: [
    {
      name: '/plugin/greeter/hello',
      description: 'Greets the one named in the payload',
      payload: Hello,
      handle: ({ payload, env, ctx }) => {
        if (payload.name.toLowerCase() === 'nobody') throw invalid('name: nobody cannot be greeted');
        greeted++;
        return { greeting: `${ctx.config.greeting ?? 'Hello'}, ${payload.name}!`, from: env.from.did };
      },
    },
  ],
  routes: [
    {
      method: 'GET',
      path: '/hello/:name',
      operationId: 'hello',
      summary: 'A greeting for :name, made by the /plugin/greeter/hello behavior',
      params: { name: { schema: z.string().min(1).max(100), what: 'name' } },
      responses: { 200: { description: 'the greeting', schema: Greeting }, 400: { description: 'a name that cannot be greeted' } },
      handler: (_event, input, ctx) => ctx.invoke(ctx.self, '/plugin/greeter/hello', { name: input.param('name') }),
    },
    {
      method: 'GET',
      path: '/stats',
      operationId: 'stats',
      summary: 'How many greetings this process made',
      responses: { 200: { description: 'the count', schema: z.object({ greeted: z.int() }) } },
      handler: () => ({ greeted }),
    },
  ],
  start: (ctx) => ctx.log.info({ greeting: ctx.config.greeting ?? 'Hello' }, 'greeter ready'),
  stop: (ctx) => ctx.log.info({ greeted }, 'greeter stopping'),
});
