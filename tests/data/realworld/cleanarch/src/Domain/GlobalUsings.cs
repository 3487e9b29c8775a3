global using CleanArchitecture.Domain.Common;
global using CleanArchitecture.Domain.Entities;
global using CleanArchitecture.Domain.Enums;
global using CleanArchitecture.Domain.Events;
global using CleanArchitecture.Domain.Exceptions;
global using CleanArchitecture.Domain.ValueObjects;