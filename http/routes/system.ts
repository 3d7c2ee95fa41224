import { redact } from '../../runtime/config.js';
import { route } from '../handler.js';
import type { RouteModule } from './types.js';

/** Health and configuration. */
export const systemRoutes: RouteModule = ({ app, config, log }) => {
  const health = route(log, () => ({ status: 'ok' }));
  app.get('/health', health);
  app.get('/api/v1/health', health);

  const showConfig = route(log, () => (config.general.debug ? { config: redact(config) } : { config: 'allowed in debug mode' }));
  app.get('/config', showConfig);
  app.get('/api/v1/config', showConfig);
};
