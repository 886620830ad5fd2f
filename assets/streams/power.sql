-- The demo code location's schema and stream, applied on every load (CREATE acts as IF NOT EXISTS).
-- TDengine's smart-meter example: one child table per device under the super table meters.
create database if not exists power precision 'ms';
use power;
create stable if not exists meters (ts timestamp, current float, voltage int, phase float)
    tags (groupid int, location varchar(24));
create table if not exists d1001 using meters tags (2, 'California.SanFrancisco');
create table if not exists d1002 using meters tags (3, 'California.SanFrancisco');
create table if not exists d1003 using meters tags (2, 'California.LosAngeles');
create table if not exists d1004 using meters tags (3, 'California.LosAngeles');

-- per device, every minute: average current, peak voltage and the number of readings
create stream if not exists power.device_current_1m interval(1m) sliding(1m) from power.meters
    partition by tbname
    into power.device_current_1m
    as select _twstart ts, avg(current) avg_current, max(voltage) max_voltage, count(*) readings from %%trows;

-- per device, each stretch of high current (above 11.5 A) as an event window; its opening and
-- closing are announced over WebSocket (watch them with `tdstream listen --port 8765`)
create stream if not exists power.high_current
    event_window(start with current > 11.5 end with current <= 11.5)
    from power.meters partition by tbname
    notify('ws://127.0.0.1:8765/power') on (window_open|window_close)
    into power.high_current
    as select _twstart ts, _twend last_high, max(current) peak, count(*) readings from %%trows;
