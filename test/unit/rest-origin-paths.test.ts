import { describe, expect, it } from 'vitest';
import { canonicalPath, roleAllows } from '../../http/auth.js';
import { originMatcher } from '../../http/guard.js';

/** The pure parts of the REST browser and role checks; test/security/browser.test.ts and rest-auth.test.ts run them on real nodes. */

describe('canonicalPath', () => {
  it('gives every spelling of a path the one the role check judges', () => {
    for (const p of ['/dev', '/dev/', '//dev', '/dev//', '/DEV', '/%64ev', '/%64%65%76/', '/dev%2F', '/./dev', '/x/../dev', '/x/..%2Fdev']) expect(canonicalPath(p), p).toBe('/dev');
    expect(canonicalPath('/')).toBe('/');
    expect(canonicalPath('/%E0%A4%A')).toBe('/%e0%a4%a');
    expect(canonicalPath('/api/v1//Jobs/')).toBe('/api/v1/jobs');
  });

  it('keeps the dev routes admin-only however written, and the operator to the actor interface and jobs', () => {
    for (const p of ['/dev/', '/API/V1/DEV/stream', '/api/v1/dev', '/api/v1/%64ev/stages']) {
      expect(roleAllows('viewer', 'GET', p), p).toBe(false);
      expect(roleAllows('operator', 'GET', p), p).toBe(false);
      expect(roleAllows('admin', 'GET', p), p).toBe(true);
    }
    expect(roleAllows('viewer', 'GET', '/developer')).toBe(true);
    expect(roleAllows('operator', 'POST', '/api/v1/jobs/')).toBe(true);
    expect(roleAllows('operator', 'POST', '/api/v1/actor/invoke')).toBe(true);
    expect(roleAllows('operator', 'POST', '/api/v1/jobsx')).toBe(false);
    expect(roleAllows('viewer', 'POST', '/api/v1/jobs')).toBe(false);
  });
});

describe('originMatcher', () => {
  it('matches a listed origin exactly, never by prefix', () => {
    const allowed = originMatcher(['http://localhost:9991']);
    expect(allowed('http://localhost:9991')).toBe(true);
    expect(allowed('HTTP://LOCALHOST:9991/')).toBe(true);
    for (const o of ['http://localhost:9991.evil', 'http://localhost:99910', 'http://localhost:999', 'https://localhost:9991', 'null', '']) expect(allowed(o), o).toBe(false);
    expect(originMatcher([])('http://localhost:9991')).toBe(false);
    expect(originMatcher(['*'])('http://anything.example')).toBe(true);
  });
});
