// types.js - one entry per value type apache-ignite-client@1.0.0 can write,
// each with three distinct values, the declared ObjectType and, where the
// read-back value differs by design (Time, float rounding), the value expected.
'use strict';

const IgniteClient = require('apache-ignite-client');
const { ObjectType, MapObjectType, CollectionObjectType, ComplexObjectType, ObjectArrayType,
        Decimal, Timestamp, EnumItem, BinaryObject } = IgniteClient;
const BinaryType = require('apache-ignite-client/lib/internal/BinaryType');

const T = ObjectType.PRIMITIVE_TYPE;

// decimal.js rounds to 20 significant digits by default, also when the client
// converts wire bytes to a Decimal; the tests use longer values.
Decimal.set({ precision: 100 });
const COL = CollectionObjectType.COLLECTION_SUBTYPE;
const MAP = MapObjectType.MAP_SUBTYPE;

class Person {
    constructor(id, name, salary) {
        this.id = id;
        this.name = name;
        this.salary = salary;
    }
}
class Address {
    constructor(street, zip) {
        this.street = street;
        this.zip = zip;
    }
}
class Company {
    constructor(name, address, staff, tags, ratings) {
        this.name = name;
        this.address = address;
        this.staff = staff;
        this.tags = tags;
        this.ratings = ratings;
    }
}

const personType = new ComplexObjectType(new Person(0, '', 0))
    .setFieldType('id', T.INTEGER)
    .setFieldType('name', T.STRING)
    .setFieldType('salary', T.DOUBLE);
const addressType = new ComplexObjectType(new Address('', 0))
    .setFieldType('street', T.STRING)
    .setFieldType('zip', T.INTEGER);
const companyType = new ComplexObjectType(new Company('', null, [], [], new Map()))
    .setFieldType('name', T.STRING)
    .setFieldType('address', addressType)
    .setFieldType('staff', new ObjectArrayType(personType))
    // not a CollectionObjectType: Node 1.0.0 crashes writing a collection
    // field (BinaryUtils.checkStandardTypeCompatibility calls _isSet() on the
    // field's numeric type code), so tags travel as an object array
    .setFieldType('tags', new ObjectArrayType(T.STRING))
    .setFieldType('ratings', new MapObjectType(MAP.HASH_MAP, T.STRING, T.INTEGER));

// The Node client cannot register enum types (reference §5.2); a real
// application gets them from Java.  The test registers one with a raw
// PUT_BINARY_TYPE (3003) through the client's own connection.
const ENUM_NAME = 'EmberColor';
const ENUM_ID = BinaryType._calculateId(ENUM_NAME);
const ENUM_VALUES = ['RED', 'GREEN', 'BLUE'];

async function registerEnum(client) {
    await client._communicator.send(3003, async (payload) => {
        payload.writeInteger(ENUM_ID);
        payload.writeByte(9);
        payload.writeString(ENUM_NAME);
        payload.writeByte(101);          // no affinity key field
        payload.writeInteger(0);         // no fields
        payload.writeBoolean(true);      // is enum
        payload.writeInteger(ENUM_VALUES.length);
        ENUM_VALUES.forEach((name, i) => {
            payload.writeByte(9);
            payload.writeString(name);
            payload.writeInteger(i);
        });
        payload.writeInteger(0);         // no schemas
    });
}

function color(ordinal) {
    return new EnumItem(ENUM_ID).setOrdinal(ordinal);
}

function uuid(seed) {
    const a = [];
    for (let i = 0; i < 16; i++) a.push((seed * 37 + i * 11) & 0xff);
    return a;
}

// Time is written as ms since local midnight (quirk 4); run.sh sets TZ=UTC.
function timeOf(h, m, s) {
    return new Date(Date.UTC(2024, 4, 17, h, m, s, 250));
}
function timeRead(d) {
    const midnight = new Date(d);
    midnight.setHours(0, 0, 0, 0);
    return new Date(d.getTime() - midnight.getTime());
}

const bigString = 'x'.repeat(70000);

function binObj(n, name) {
    return new BinaryObject('EmberBinType')
        .setField('n', n, T.INTEGER)
        .setField('name', name, T.STRING)
        .setField('blob', [n & 0x7f, 1, 2], T.BYTE_ARRAY);
}

async function binObjPlain(bo) {
    return {
        type: bo.getTypeName(),
        n: await bo.getField('n', T.INTEGER),
        name: await bo.getField('name'),
        blob: await bo.getField('blob'),
    };
}

// Each entry: name, type (ObjectType or null for the client's default),
// values [a, b, c] (distinct), optional expect(v) (what reading v returns),
// optional plain(v) async converter for values norm() cannot compare,
// key: usable as a cache key.
const TYPES = [
    { name: 'byte', type: T.BYTE, values: [1, -128, 127], key: true },
    { name: 'short', type: T.SHORT, values: [2, -32768, 32767], key: true },
    { name: 'integer', type: T.INTEGER, values: [3, -2147483648, 2147483647], key: true },
    { name: 'long', type: T.LONG, values: [4, -9007199254740991, 9007199254740991], key: true },
    { name: 'float', type: T.FLOAT, values: [1.5, -0.25, 3.4028234663852886e38], key: true },
    { name: 'double', type: T.DOUBLE, values: [2.5, -1e-300, Number.MAX_VALUE], key: true },
    { name: 'untyped number (double)', type: null, values: [7, 7.5, -8], key: true },
    { name: 'char', type: T.CHAR, values: ['a', 'Ω', '\u20ac'], key: true },
    { name: 'boolean', type: T.BOOLEAN, values: [true, false, true], key: true },
    { name: 'string', type: T.STRING, values: ['hello', '', 'héllo ✓ 😀 \u0000 end'], key: true },
    { name: 'long string', type: T.STRING, values: [bigString, 'short', bigString + 'y'] },
    { name: 'uuid', type: T.UUID, values: [uuid(1), uuid(2), uuid(3)], key: true },
    { name: 'date', type: T.DATE, values: [new Date(0), new Date(1700000000123), new Date(-86400000)], key: true },
    { name: 'timestamp', type: T.TIMESTAMP,
      values: [new Timestamp(1700000000123, 456789), new Timestamp(0, 0), new Timestamp(1600000000000, 999999)], key: true },
    { name: 'time', type: T.TIME, values: [timeOf(0, 0, 1), timeOf(12, 30, 0), timeOf(23, 59, 59)],
      expect: timeRead, key: true },
    { name: 'decimal', type: T.DECIMAL,
      values: [new Decimal('1.5'), new Decimal('-123456789012345678901234567890.000123'), new Decimal('1e30')], key: true },
    { name: 'enum', type: T.ENUM, values: [color(0), color(2), color(1)], key: true, needsEnum: true },
    { name: 'byte array', type: T.BYTE_ARRAY, values: [[1, 2, -3], [], [127, -128]] },
    { name: 'short array', type: T.SHORT_ARRAY, values: [[1, -2], [32767], []] },
    { name: 'integer array', type: T.INTEGER_ARRAY, values: [[1, 2, 3], [-2147483648], []] },
    { name: 'long array', type: T.LONG_ARRAY, values: [[1, -2, 2 ** 50], [0], []] },
    { name: 'float array', type: T.FLOAT_ARRAY, values: [[1.5, -2], [0.125], []] },
    { name: 'double array', type: T.DOUBLE_ARRAY, values: [[1.5, -2.25, 1e100], [0], []] },
    { name: 'char array', type: T.CHAR_ARRAY, values: [['a', 'b'], ['Ω'], []] },
    { name: 'boolean array', type: T.BOOLEAN_ARRAY, values: [[true, false], [false], []] },
    { name: 'string array', type: T.STRING_ARRAY, values: [['a', null, 'ü'], ['only'], []] },
    { name: 'uuid array', type: T.UUID_ARRAY, values: [[uuid(4), uuid(5)], [uuid(6)], []] },
    { name: 'date array', type: T.DATE_ARRAY, values: [[new Date(1), new Date(2)], [new Date(3)], []] },
    { name: 'decimal array', type: T.DECIMAL_ARRAY,
      values: [[new Decimal('1.25'), new Decimal('-7')], [new Decimal('0')], []] },
    { name: 'timestamp array', type: T.TIMESTAMP_ARRAY,
      values: [[new Timestamp(5, 6), new Timestamp(7, 8)], [new Timestamp(9, 10)], []] },
    { name: 'time array', type: T.TIME_ARRAY, values: [[timeOf(1, 2, 3)], [timeOf(4, 5, 6), timeOf(7, 8, 9)], []],
      expect: (a) => a.map(timeRead) },
    { name: 'object array of strings', type: new ObjectArrayType(T.STRING), values: [['a', 'b'], ['c'], []] },
    { name: 'object array untyped', type: new ObjectArrayType(), values: [['a', 1.5, true], [2], []] },
    { name: 'object array of complex', type: new ObjectArrayType(personType),
      values: [[new Person(1, 'ann', 10.5), new Person(2, 'bob', 20)], [new Person(3, 'cy', 0)], []] },
    { name: 'collection ArrayList', type: new CollectionObjectType(COL.ARRAY_LIST, T.INTEGER), values: [[1, 2, 3], [4], []] },
    { name: 'collection LinkedList', type: new CollectionObjectType(COL.LINKED_LIST, T.STRING), values: [['a', 'b'], ['c'], []] },
    { name: 'collection HashSet', type: new CollectionObjectType(COL.HASH_SET, T.INTEGER),
      values: [new Set([1, 2, 3]), new Set([4]), new Set()] },
    { name: 'collection LinkedHashSet', type: new CollectionObjectType(COL.LINKED_HASH_SET, T.STRING),
      values: [new Set(['x', 'y']), new Set(['z']), new Set()] },
    { name: 'collection UserCol', type: new CollectionObjectType(COL.USER_COL, T.LONG), values: [[1, 2], [3], []] },
    { name: 'collection UserSet', type: new CollectionObjectType(COL.USER_SET, T.SHORT),
      values: [new Set([1, 2]), new Set([3]), new Set()] },
    { name: 'collection SingletonList', type: new CollectionObjectType(COL.SINGLETON_LIST, T.STRING),
      values: [['one'], ['two'], ['three']] },
    { name: 'collection of complex', type: new CollectionObjectType(COL.ARRAY_LIST, personType),
      values: [[new Person(1, 'a', 1), new Person(2, 'b', 2)], [new Person(3, 'c', 3)], []] },
    { name: 'map HashMap', type: new MapObjectType(MAP.HASH_MAP, T.STRING, T.INTEGER),
      values: [new Map([['a', 1], ['b', 2]]), new Map([['c', 3]]), new Map()] },
    { name: 'map LinkedHashMap', type: new MapObjectType(MAP.LINKED_HASH_MAP, T.INTEGER, T.DOUBLE),
      values: [new Map([[1, 1.5], [2, 2.5]]), new Map([[3, -1]]), new Map()] },
    { name: 'map of complex', type: new MapObjectType(MAP.HASH_MAP, T.STRING, personType),
      values: [new Map([['p1', new Person(1, 'a', 1)], ['p2', new Person(2, 'b', 2)]]), new Map([['p3', new Person(3, 'c', 3)]]), new Map()] },
    { name: 'complex object', type: personType,
      values: [new Person(1, 'ann', 10.5), new Person(2, 'bob', -3), new Person(3, '', 0)], key: true },
    { name: 'nested complex object', type: companyType,
      values: [
          // one staff member each: Node 1.0.0 cannot read back an array of
          // two or more complex objects nested in a complex object (quirk 2:
          // toObject leaves the buffer at the last field, and fields inside an
          // object are stored as written, not 27-wrapped); test_cache.js reads
          // longer nested arrays through BinaryObject instead
          new Company('acme', new Address('main st', 12345), [new Person(1, 'a', 1)], ['x', 'y'], new Map([['q', 5]])),
          new Company('b corp', new Address('side st', 1), [], [], new Map()),
          new Company('c', new Address('', 0), [new Person(9, 'z', 9)], ['t'], new Map([['r', 1], ['s', 2]])),
      ] },
    { name: 'BinaryObject', type: null, values: [binObj(1, 'one'), binObj(2, 'two'), binObj(3, 'three')],
      plain: binObjPlain, key: true },
];

module.exports = { TYPES, Person, Address, Company, personType, addressType, companyType,
                   registerEnum, color, ENUM_ID, ENUM_VALUES, uuid, binObj, binObjPlain };
