export class AccountsClient {
  constructor(baseUrl) { this.baseUrl = baseUrl; }
  async get(id) {
    const res = await fetch(`${this.baseUrl}/accounts/${id}`);
    return res.json();
  }
}
const query = "SELECT * FROM dbo.Accounts WHERE Id = @id";
