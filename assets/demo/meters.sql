-- The demo schema: TDengine's smart-meter example (super table meters, one child table per device).
create database if not exists power precision 'ms' keep 3650;
use power;
create stable if not exists meters (ts timestamp, current float, voltage int, phase float) tags (groupid int, location varchar(24));
create table if not exists d1001 using meters tags (2, 'California.SanFrancisco');
create table if not exists d1002 using meters tags (3, 'California.SanFrancisco');
create table if not exists d1003 using meters tags (2, 'California.LosAngeles');
insert into d1001 values ('2025-01-01 00:00:00.000', 10.3, 219, 0.31) ('2025-01-01 00:00:30.000', 12.6, 218, 0.33) ('2025-01-01 00:01:10.000', 11.8, 221, 0.32);
insert into d1002 values ('2025-01-01 00:00:05.000', 10.1, 220, 0.28) ('2025-01-01 00:01:20.000', 10.9, 222, 0.29);
insert into d1003 values ('2025-01-01 00:00:20.000', 11.2, 217, 0.30);
