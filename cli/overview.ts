/** What `dms` alone prints: the few commands a newcomer needs first, and where the rest is. */
export const OVERVIEW = `dms drives a DMS node: a device that runs jobs for a compute network.

Get started:
  dms start --detach                     start a node from this home (~/.dms, or --home DIR)
  dms status                             is the node running and healthy
  dms run busybox echo hello             run a job and follow its output, like docker run
  dms jobs list                          the node's jobs (ids shortened; any unique prefix works)
  dms jobs describe <id>                 everything about one job
  dms jobs logs <id> --follow            a job's output until it ends
  dms resources show                     what the node offers, holds and has free
  dms stop                               stop the node

Every command has --help; \`dms --help\` lists them all. --json prints data (and errors) as JSON.
`;
