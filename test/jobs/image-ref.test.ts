// The image reference grammar and the registry policy, as tables: each row is a case an
// attacker or a user wrote.
import { describe, expect, it } from 'vitest';
import { parseImageReference } from '../../behaviors/jobs/image-ref.js';
import { JobSpecSchema } from '../../behaviors/jobs/schema.js';
import ipaddr from 'ipaddr.js';
import { nonPublicReason, numericIPv4, refusedRegistry, refusedRegistryResolved, type Resolve } from '../../actors/orchestrator/registries.js';

const hex64 = 'a'.repeat(64);

describe('image references', () => {
  it.each([
    ['busybox', { path: 'busybox' }],
    ['busybox:latest', { path: 'busybox', tag: 'latest' }],
    ['dms-test/busybox:latest', { path: 'dms-test/busybox', tag: 'latest' }],
    ['library/ubuntu:22.04', { path: 'library/ubuntu', tag: '22.04' }],
    ['ghcr.io/org/app:v1.2.3-rc_1', { domain: 'ghcr.io', path: 'org/app', tag: 'v1.2.3-rc_1' }],
    ['registry.example.com:5000/team/app', { domain: 'registry.example.com:5000', path: 'team/app' }],
    ['localhost/app', { domain: 'localhost', path: 'app' }],
    ['localhost:5000/app:1', { domain: 'localhost:5000', path: 'app', tag: '1' }],
    ['[::1]:5000/app', { domain: '[::1]:5000', path: 'app' }],
    ['Registry.Example/app', { domain: 'Registry.Example', path: 'app' }],
    ['a__b/c.d/e--f_g', { path: 'a__b/c.d/e--f_g' }],
    [`app@sha256:${hex64}`, { path: 'app', digest: `sha256:${hex64}` }],
    [`app:1@sha256:${hex64}`, { path: 'app', tag: '1', digest: `sha256:${hex64}` }],
    [`a/b@sha512+b64u:${'0'.repeat(32)}`, { path: 'a/b', digest: `sha512+b64u:${'0'.repeat(32)}` }],
    ['none', { path: 'none' }],
  ])('accepts %s', (ref, parts) => {
    expect(parseImageReference(ref)).toEqual(parts);
    expect(JobSpecSchema.shape.image.safeParse(ref).success).toBe(true);
  });

  it.each([
    ['', /is empty/],
    ['//x/y', /repository '\/\/x\/y' is not/],
    ['/x', /registry|repository/],
    ['../../containers/json?all=1#', /registry '\.\.' is not host/],
    ['../x', /registry '\.\.' is not host/],
    ['x/../y', /repository 'x\/..\/y'/],
    ['UPPER', /repository 'UPPER'/],
    ['app:', /tag '' is not/],
    ['app:-bad', /tag '-bad' is not/],
    [`app:${'t'.repeat(129)}`, /tag/],
    ['app@sha256:abc', /digest 'sha256:abc'/],
    ['app@', /digest '' is not/],
    ['a/b?x=1', /repository 'b\?x=1'|tag|repository/],
    ['a#b', /repository 'a#b'/],
    ['a b', /repository 'a b'/],
    ['a_-b', /repository/],
    ['a/', /repository 'a\/'/],
    ['bad_host:5000:1/x', /registry 'bad_host:5000:1' is not host/],
    ['-host.com/x', /registry '-host.com' is not host/],
    [hex64, /image id/],
    [`${'a'.repeat(256)}`, /longer than 255/],
    ['app%2F..%2Fx', /repository/],
  ])('refuses %j', (ref, why) => {
    const parsed = parseImageReference(ref);
    expect(parsed).toHaveProperty('error');
    expect((parsed as { error: string }).error).toMatch(why);
    const result = JobSpecSchema.shape.image.safeParse(ref);
    expect(result.success).toBe(false);
    expect(result.error!.issues[0].message).toMatch(/^not a Docker image reference: /);
  });
});

describe('registry hosts', () => {
  it.each([
    ['127.0.0.1:5000/x', 'is a non-public address'],
    ['127.9.9.9/x', 'is a non-public address'],
    ['localhost/x', 'names this machine'],
    ['localhost:5000/x', 'names this machine'],
    ['LOCALHOST:5000/x', 'names this machine'],
    ['registry.localhost/x', 'names this machine'],
    ['[::1]:5000/x', '::1 (loopback)'],
    ['[::ffff:7f00:1]/x', 'carries 127.0.0.1 (loopback)'],
    ['[fe80::1]/x', 'is a non-public address'],
    ['[fd12:3456::1]/x', 'is a non-public address'],
    ['[::]/x', 'is a non-public address'],
    ['169.254.169.254/x', 'is a non-public address'],
    ['10.1.2.3/x', 'is a non-public address'],
    ['172.16.0.1/x', 'is a non-public address'],
    ['172.31.255.255/x', 'is a non-public address'],
    ['192.168.1.1:443/x', 'is a non-public address'],
    ['0.0.0.0:5000/x', 'is a non-public address'],
    ['127.1:5000/x', 'is a non-public address'],
    ['0x7f.0.0.1/x', 'is a non-public address'],
    ['2130706433:5000/x', 'is a non-public address'],
    // Carrier-grade NAT: 100.100.100.200 is a cloud's metadata service.
    ['100.100.100.200/x', '100.100.100.200 (carrierGradeNat)'],
    ['[::7f00:1]/x', 'carries 127.0.0.1 (loopback)'],
    ['[64:ff9b::7f00:1]/x', 'carries 127.0.0.1 (loopback)'],
    ['[64:ff9b::a9fe:a9fe]/x', 'carries 169.254.169.254 (linkLocal)'],
    ['[::ffff:0:a00:1]/x', 'carries 10.0.0.1 (private)'],
    ['[2002:c0a8:101::1]/x', 'carries 192.168.1.1 (private)'],
    ['[64:ff9b:1::1]/x', '(rfc6052)'],
    ['[ff02::1]/x', '(multicast)'],
    ['[2001:db8::1]/x', '(reserved)'],
    ['[fec0::1]/x', 'non-public'],
    ['224.0.0.1/x', '(multicast)'],
    ['255.255.255.255/x', '(broadcast)'],
    ['192.0.2.1/x', '(reserved)'],
    ['240.0.0.1/x', '(reserved)'],
  ])('refuses %s unless allowed', (image, why) => {
    expect(refusedRegistry(image, [])).toContain(why);
    expect(refusedRegistry(image, [])).toMatch(/^image: registry .* list it in jobs\.allowed_registries/);
    const domain = image.slice(0, image.indexOf('/'));
    expect(refusedRegistry(image, [domain])).toBeNull();
  });

  it('allows public registries, Docker Hub names, and a listed host on any port only when listed without one', () => {
    for (const image of ['busybox', 'library/busybox', 'ghcr.io/a/b', '8.8.8.8/x', '172.32.0.1/x', '100.128.0.1/x', '[2606:4700::1111]/x', '[::ffff:8.8.8.8]/x', '[64:ff9b::808:808]/x', 'dms-test/busybox:latest']) {
      expect(refusedRegistry(image, [])).toBeNull();
    }
    expect(refusedRegistry('127.0.0.1:5000/x', ['127.0.0.1'])).toBeNull();
    expect(refusedRegistry('127.0.0.1:5000/x', ['127.0.0.1:6000'])).not.toBeNull();
    expect(refusedRegistry('[::1]:5000/x', ['[::1]:5000'])).toBeNull();
  });

  it('reads numeric hosts as inet_aton does', () => {
    expect(numericIPv4('127.1')).toBe('127.0.0.1');
    expect(numericIPv4('2130706433')).toBe('127.0.0.1');
    expect(numericIPv4('0x7f.1')).toBe('127.0.0.1');
    expect(numericIPv4('0177.0.0.1')).toBe('127.0.0.1');
    expect(numericIPv4('10.0.258')).toBe('10.0.1.2');
    expect(numericIPv4('256.0.0.1')).toBeNull();
    expect(numericIPv4('example.com')).toBeNull();
    expect(numericIPv4('08.1.1.1')).toBeNull();
  });

  it('classifies addresses by their range, and IPv6 forms that carry an IPv4 address by that address', () => {
    const why = (a: string) => nonPublicReason(ipaddr.parse(a));
    for (const a of ['8.8.8.8', '1.1.1.1', '100.63.255.255', '100.128.0.0', '2606:4700::1111', '2a00:1450::1', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:808:808::1']) {
      expect(why(a), a).toBeNull();
    }
    const refused: [string, RegExp][] = [
      ['100.64.0.1', /carrierGradeNat/],
      ['100.127.255.255', /carrierGradeNat/],
      ['0.1.2.3', /unspecified/],
      ['198.18.0.1', /reserved/],
      ['::', /unspecified/],
      ['::1', /loopback/],
      ['::127.0.0.1', /carries 127\.0\.0\.1 \(loopback\)/],
      ['::2', /carries 0\.0\.0\.2 \(unspecified\)/],
      ['::ffff:169.254.169.254', /carries 169\.254\.169\.254 \(linkLocal\)/],
      ['64:ff9b::10.0.0.1', /carries 10\.0\.0\.1 \(private\)/],
      ['64:ff9b::100.100.100.200', /carries 100\.100\.100\.200 \(carrierGradeNat\)/],
      ['2001::1', /teredo/],
      ['100::1', /discard/],
      ['fd00::1', /uniqueLocal/],
      ['fe80::1', /linkLocal/],
      ['4000::1', /not global unicast/],
    ];
    for (const [a, reason] of refused) expect(why(a), a).toMatch(reason);
  });
});

describe('registry names, resolved at submit', () => {
  const answers: Record<string, string[]> = {
    'vm': ['127.0.0.1'],
    'registry.corp.example': ['140.82.112.4', '10.0.0.5'],
    'meta.example': ['100.100.100.200'],
    'nat64.example': ['64:ff9b::7f00:1'],
    'six.example': ['fd00::7'],
    'ghcr.io': ['140.82.112.33'],
  };
  let asked: string[] = [];
  const resolve: Resolve = async (host) => {
    asked.push(host);
    const a = answers[host];
    if (!a) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return a.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };

  it('refuses a name that resolves to a loopback, link-local or private address, naming it', async () => {
    expect(await refusedRegistryResolved('vm:5000/x', [], resolve)).toBe(
      'image: registry vm:5000 resolves to 127.0.0.1 (loopback), a non-public address; list it in jobs.allowed_registries to pull from it',
    );
    expect(await refusedRegistryResolved('meta.example/x', [], resolve)).toMatch(/resolves to 100\.100\.100\.200 \(carrierGradeNat\)/);
    expect(await refusedRegistryResolved('nat64.example/x', [], resolve)).toMatch(/resolves to 64:ff9b::7f00:1, which carries 127\.0\.0\.1/);
    expect(await refusedRegistryResolved('registry.corp.example/team/app:1', [], resolve)).toMatch(/resolves to 10\.0\.0\.5/);
    expect(await refusedRegistryResolved('six.example/x', [], resolve)).toMatch(/resolves to fd00::7/);
  });

  it('lets a listed name, a public name and a name that does not resolve through; asks nothing for Docker Hub or literal addresses', async () => {
    asked = [];
    expect(await refusedRegistryResolved('vm:5000/x', ['vm:5000'], resolve)).toBeNull();
    expect(await refusedRegistryResolved('vm:5000/x', ['vm'], resolve)).toBeNull();
    expect(await refusedRegistryResolved('ghcr.io/org/app', [], resolve)).toBeNull();
    expect(await refusedRegistryResolved('nowhere.example/x', [], resolve)).toBeNull();
    expect(asked).toEqual(['ghcr.io', 'nowhere.example']);
    asked = [];
    for (const image of ['busybox', 'library/busybox', 'vm/x', '8.8.8.8/x', '[2606:4700::1111]/x']) expect(await refusedRegistryResolved(image, [], resolve)).toBeNull();
    expect(await refusedRegistryResolved('127.0.0.1:5000/x', [], resolve)).toMatch(/is a non-public address: 127\.0\.0\.1 \(loopback\)/);
    expect(asked).toEqual([]);
  });

  it('leaves a lookup that does not answer to the engine', async () => {
    const never: Resolve = () => new Promise(() => {});
    expect(await refusedRegistryResolved('slow.example/x', [], never)).toBeNull();
  });
});
